"""What observe() asks of each role: ``targets`` (every role, indexed once) is ``target`` per role."""

from __future__ import annotations

from reconciler.core.desired import (
    Desired,
    Mode,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Remembered, RoleRecord
from reconciler.core.observed import flat_record
from reconciler.world.observe import target, targets


def _record(name: str, runtime: Runtime, port: int, **kw: object) -> RoleRecord:
    return flat_record(name=name, instance_id=f"{name}-0000abcd", runtime=runtime,
                      mode=Mode.MANAGED, port=port, **kw)  # type: ignore[arg-type]


def test_targets_are_each_roles_target() -> None:
    """§4 every desired and remembered role is observed, each as ``target`` reads it alone:
    its spec, its record (a removed role: the record only) and the Model it names (an
    Ollama role lists its Model's tag) — looked up by name, not by position."""
    models = tuple(
        ModelSpec(name=f"m{i}", format=ModelFormat.OLLAMA,
                  source=ModelSourceInfo(ollama_tag=f"tag{i}:1b"))
        for i in range(3))
    desired = Desired(
        roles=(
            RoleSpec(name="a", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="m2",
                     serve=ServeSpec(port=11434)),
            RoleSpec(name="b", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="m0",
                     serve=ServeSpec(port=8001)),
            RoleSpec(name="d", runtime=Runtime.MLX_LM, mode=Mode.ADOPTED, serve=ServeSpec(port=8003)),
        ),
        models=models,
    )
    remembered = Remembered(roles=(
        _record("a", Runtime.OLLAMA, 11434, model_tag="tag9:1b"),
        _record("c", Runtime.LLAMACPP, 8002, pid=4242, create_time=100.0, started_at=100.0,
                launch_argv=("/bin/llama-server", "--alias", "c")),
        _record("b", Runtime.LLAMACPP, 8001, pid=4343, create_time=100.0, started_at=100.0),
    ))
    got = targets(desired, remembered)
    assert [t.name for t in got] == ["a", "b", "c", "d"]
    assert got == [target(n, desired, remembered) for n in ("a", "b", "c", "d")]
    by_name = {t.name: t for t in got}
    assert by_name["a"].ctx.wanted == "tag2:1b"  # its Model's tag, not the one it loaded last
    assert by_name["c"].spec is None and by_name["c"].record is remembered.roles[1]
    assert by_name["b"].ctx.starting  # its own record: started, not healthy yet
    assert by_name["d"].record is None and by_name["d"].ctx.adopted
