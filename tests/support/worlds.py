"""The planner's inputs as values: the node, Models, roles and context tests and benches share.

Every planner test, property and bench used to spell these itself; the ones that were the
same everywhere are here (a test that needs another value keeps its own, beside its reason):
the reconciler's environment and data root (``CTX``), the serve programs, the ``qwen`` GGUF
Model of one 1 GB shard, GPUs by size, and a role (managed llama.cpp unless said).
"""

from __future__ import annotations

from reconciler.core.decisions import PlanContext
from reconciler.core.desired import (
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSpec,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.devices import Device, DeviceKind, DeviceRequest

GB = 10**9
#: The reconciler's own environment as a pass hands it to ``plan()`` (HOME and PATH pass through).
ENVIRON = (("HOME", "/home/op"), ("PATH", "/usr/bin:/bin"))
DATA_ROOT = "/srv/instances"
CTX = PlanContext(environ=ENVIRON, data_root=DATA_ROOT)
LLAMA_PROGRAM = ((Runtime.LLAMACPP, "/opt/llama-server"),)
SERVE_PROGRAMS = (*LLAMA_PROGRAM, (Runtime.MLX_LM, "/opt/mlx_lm.server"))


def gguf(name: str = "qwen", *, root: str | None = None, size: int = GB, path: str = "q.gguf",
         sha256: str = "0" * 64) -> ModelSpec:
    """A GGUF Model of one shard under ``root`` (``/m/<name>`` unless given)."""
    return ModelSpec(name=name, format=ModelFormat.GGUF, root=root or f"/m/{name}",
                     shards=(ModelFile(path=path, sha256=sha256, size=size),))


QWEN = gguf()


def gpus(*memories: int, kind: DeviceKind = DeviceKind.CUDA) -> tuple[Device, ...]:
    """Declared devices ``<kind>:0``, ``<kind>:1`` … of the given memories, in order."""
    return tuple(Device(id=f"{kind}:{i}", kind=kind, memory=m) for i, m in enumerate(memories))


def role(name: str, port: int, *, model: str = "qwen", runtime: Runtime = Runtime.LLAMACPP,
         mode: Mode = Mode.MANAGED, ctx: int | None = None, memory: MemorySpec | None = None,
         devices: DeviceRequest | None = None, **fields: object) -> RoleSpec:
    """A role of ``runtime`` (managed unless said) serving ``model`` on ``port``; any other
    RoleSpec field as given."""
    serve = ServeSpec(port=port) if ctx is None else ServeSpec(port=port, ctx=ctx)
    return RoleSpec(name=name, runtime=runtime, mode=mode, model=model, serve=serve,
                    memory=memory or MemorySpec(), devices=devices, **fields)
