"""§14 a new Program is a new generation: the restart's words name the versions."""

from __future__ import annotations

import attrs
import pytest

from reconciler.core.desired import Desired, Mode, ModelFile, NodeConfig, ProgramSpec, RoleSpec
from reconciler.core.desired import Runtime, ServeSpec
from reconciler.planner import identity
from reconciler.planner.plan import plan
from tests.plan.worlds import CTX, MODELS, MODELS_BY_NAME, converged


def _program(name: str, version: str, root: str, sha: str) -> ProgramSpec:
    return ProgramSpec(name=name, runtime=Runtime.LLAMACPP, version=version, entrypoint="x",
                       root=root, files=(ModelFile(path="x", sha256=sha * 64, size=1),))


def _switched(old: ProgramSpec, new: ProgramSpec, declared: tuple[ProgramSpec, ...]):
    """One role running ``old`` (its record's launch), the node now naming ``new``."""
    role = RoleSpec(name="a", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                    serve=ServeSpec(port=8080))
    before = NodeConfig(serve_programs=((Runtime.LLAMACPP, old.name),))
    launch = identity.launch(role, MODELS_BY_NAME, before, dict(CTX.environ), CTX.data_root,
                             (old,))
    node = NodeConfig(serve_programs=((Runtime.LLAMACPP, new.name),))
    w = converged(Desired(roles=(role,), models=MODELS, node=node, programs=declared))
    (rec,) = w.remembered.roles
    w = attrs.evolve(w, remembered=attrs.evolve(w.remembered, roles=(attrs.evolve(
        rec, launch_digest=launch.digest, launch_argv=launch.argv),)))
    (d,) = plan(w.desired, w.observed, w.remembered, w.ctx, w.now).decisions
    return d


OLD_HERE = _program("llama-b11434", "b11434", "/p", "a")
NEW_HERE = _program("llama-b11500", "b11500", "/p", "b")  # another build at the same path
PREBUILT = _program("llama-b10068", "b10068", "/q", "c")  # another path


@pytest.mark.parametrize(("old", "new", "declared", "why"), [
    (PREBUILT, OLD_HERE, (OLD_HERE, PREBUILT), "program b10068 → b11434"),
    (OLD_HERE, NEW_HERE, (OLD_HERE, NEW_HERE), "program b11434 → b11500"),
    (OLD_HERE, attrs.evolve(NEW_HERE, version="b11434", name="fork"), None,
     "program llama-b11434 → fork (b11434)"),
    (OLD_HERE, NEW_HERE, (NEW_HERE,), "launch environment changed"),
    (PREBUILT, OLD_HERE, (OLD_HERE,), "program /q/x → /p/x"),
])
def test_a_switch_of_program_restarts_once_naming_the_versions(old, new, declared, why):
    """§14: a role whose node now names another Program restarts (spec_changed) and the
    restart's words name both versions, from another path or at the same one (the record
    keeps the argv, not the environment: the old Program is the node's one whose label
    gives the record's digest); an old Program no longer declared is not guessed."""
    d = _switched(old, new, declared if declared is not None else (old, new))
    assert (str(d.verb), str(d.reason)) == ("restart", "spec_changed")
    assert d.why == why
