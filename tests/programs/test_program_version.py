"""§14 after start: the server's own build against its Program's version."""

from __future__ import annotations

import pytest

from reconciler.core.desired import ModelFile, ProgramSpec, Runtime
from reconciler.planner import versions
from reconciler.runtimes import llamacpp
from reconciler.runtimes.common import ProbeAnswer, ProbeContext


def program(version: str = "b11434", runtime: Runtime = Runtime.LLAMACPP) -> ProgramSpec:
    return ProgramSpec(name="llama", runtime=runtime, version=version, entrypoint="x",
                       root="/p", files=(ModelFile(path="x", sha256="a" * 64, size=1),))


@pytest.mark.parametrize("reported, want", [
    ("b11434-4f0e1a2", None),
    ("b11434", None),
    ("b11434-unknown", None),  # the testbed's build: its number given, no commit (setup.sh)
    ("b11500-4f0e1a2", True),
    ("b9628-abc", True),
    ("b0-unknown", False),   # a build from a source tarball without LLAMA_BUILD_NUMBER
    ("b1-571d0d5", False),   # the prebuilt wheel: a commit, no number
    ("unknown", False),
    (None, None),            # nothing reported: nothing to say
])
def test_llama_builds_are_compared_by_number(reported, want):
    """§14: the same build number passes; another is a mismatch (degraded); build 0 or 1
    (no number) cannot be confirmed, which is said and never degrades."""
    said = versions.check(program(), reported)
    assert (said[0] if said is not None else None) is want
    if want is True:
        assert said[1] == (f"program llama is version b11434, the server reports {reported}: "
                           "another build runs than the one pinned")
    if want is False:
        assert "version b11434 not confirmed" in said[1]


def test_other_runtimes_compare_their_version_text():
    """§14: mlx-lm's version is compared as text."""
    mlx = program("0.26.3", Runtime.MLX_LM)
    assert versions.check(mlx, "0.26.3") is None
    assert versions.check(mlx, "0.27.0")[0] is True


def test_a_settled_llama_server_is_asked_its_build_only_when_it_runs_a_program():
    """§14: /props (its build_info) is asked of our settled server when the role runs a
    Program, not otherwise (a settled server is asked /health alone, as before)."""
    def asked(ctx):
        gen = llamacpp.exchange(ctx)
        sent = [r.path for r in next(gen)]
        try:
            sent += [r.path for r in gen.send((ProbeAnswer(status=200, body={}),))]
        except StopIteration:
            pass
        return sent
    assert asked(ProbeContext(settled=True)) == ["/health"]
    assert asked(ProbeContext(settled=True, version=True)) == ["/health", "/props"]
    facts = llamacpp.read({"/health": ProbeAnswer(status=200, body={}),
                           "/props": ProbeAnswer(status=200, body={"build_info": "b0-unknown"})},
                          ProbeContext(settled=True, version=True))
    assert facts.version == "b0-unknown"


def _running_world(reported: str | None):
    """A converged world: one managed llama.cpp role running Program `llama` (b11434),
    its server up and reporting ``reported`` as its build."""
    import attrs

    from reconciler.core.desired import Desired, Mode, NodeConfig, RoleSpec, ServeSpec
    from reconciler.planner import identity
    from tests.plan.worlds import CTX, MODELS, MODELS_BY_NAME, converged

    prog = program()
    node = NodeConfig(serve_programs=((Runtime.LLAMACPP, "llama"),))
    role = RoleSpec(name="a", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                    serve=ServeSpec(port=8080))
    desired = Desired(roles=(role,), models=MODELS, node=node, programs=(prog,))
    w = converged(desired)
    launch = identity.launch(role, MODELS_BY_NAME, node, dict(CTX.environ), CTX.data_root,
                             (prog,))
    (rec,) = w.remembered.roles
    (obs,) = w.observed.roles
    return attrs.evolve(
        w, remembered=attrs.evolve(w.remembered, roles=(attrs.evolve(
            rec, launch_digest=launch.digest, launch_argv=launch.argv),)),
        observed=attrs.evolve(w.observed, roles=(attrs.evolve(
            obs, probe=attrs.evolve(obs.probe, version=reported)),)))


@pytest.mark.parametrize("reported, reason, status", [
    ("b11434-4f0e1a2", "in_sync", "running"),
    ("b11500-4f0e1a2", "version_mismatch", "degraded"),
    ("b0-unknown", "in_sync", "running"),
])
def test_a_server_running_another_build_is_degraded(reported, reason, status):
    """§14: the planner keeps the server (no restart) but calls it degraded, with the reason,
    when its build is not the Program's; an unconfirmable build is said, not degraded."""
    from reconciler.planner.plan import plan

    w = _running_world(reported)
    (d,) = plan(w.desired, w.observed, w.remembered, w.ctx, w.now).decisions
    assert (str(d.verb), str(d.reason), str(d.status)) == ("keep", reason, status)
    if reason == "version_mismatch":
        assert d.detail.startswith("program llama is version b11434, the server reports b11500")
    if reported == "b0-unknown":
        assert "program llama version b11434 not confirmed" in d.detail


def test_an_unreadable_mlx_version_is_not_confirmed():
    """§14: an mlx-lm server whose version could not be read (``unknown``) is said as not
    confirmed, never degraded; the same text for a llama.cpp build is no number either."""
    said = versions.check(program("0.32.2", Runtime.MLX_LM), versions.UNKNOWN)
    assert said is not None and said[0] is False
    assert "program llama version 0.32.2 not confirmed" in said[1]


def test_a_dist_info_version_is_read_from_its_metadata(tmp_path):
    """§14 world/pkgversion: ``Version:`` of the project's dist-info (``mlx_lm-*``), only
    from the headers; none for a folder without it."""
    from reconciler.world import pkgversion

    info = tmp_path / "mlx_lm-0.32.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mlx-lm\nVersion: 0.32.2\n\n"
                                   "Version: 9.9 (the description, not a header)\n")
    (tmp_path / "mlx_lm_extra-1.0.dist-info").mkdir()
    assert pkgversion.dist_version(str(tmp_path), "mlx_lm") == "0.32.2"
    assert pkgversion.dist_version(str(tmp_path), "mlx-lm") == "0.32.2"
    assert pkgversion.dist_version(str(tmp_path), "numpy") is None
    assert pkgversion.dist_version(str(tmp_path / "nowhere"), "mlx_lm") is None


def test_the_mlx_lm_version_of_a_running_interpreter_is_its_own():
    """§14 world/pkgversion on a real process: an interpreter of the testbed's mlx venv that
    has imported mlx is read as running that venv's mlx_lm (the version its own
    importlib.metadata says); a process without mlx mapped reads as None, and the observer
    reports it ``unknown`` (not confirmed); only our own live, answering server is read."""
    import os
    import subprocess
    from pathlib import Path

    import attrs

    from reconciler.core.observed import Health, ProbeFacts, ProcessFacts
    from reconciler.world import pkgversion

    python = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"),
                  "mlx-venv", "bin", "python")
    if not python.exists():  # `make testbed` installs it: a missing testbed fails, never skips
        pytest.fail(f"the mlx testbed is missing ({python}): run testbed/setup_mlx.sh")
    child = subprocess.Popen(
        [str(python), "-c", "import importlib.metadata as m, sys, mlx.core; "
         "print(m.version('mlx-lm'), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with child:
        want = child.stdout.readline().strip()
        assert want and pkgversion.mlx_lm(child.pid) == want
        # the observer: our live, answering server's version; a stranger's is never read
        ours = ProcessFacts(pid=child.pid, create_time=0.0, alive=True, owned=True)
        up = ProbeFacts(health=Health.UP)
        assert pkgversion.observed(up, ours).version == want
        assert pkgversion.observed(up, attrs.evolve(ours, owned=False)).version is None
        assert pkgversion.observed(ProbeFacts(health=Health.LOADING), ours).version is None
        child.stdin.close()
        child.wait(timeout=30)
    assert pkgversion.mlx_lm(os.getpid()) is None
    me = ProcessFacts(pid=os.getpid(), create_time=0.0, alive=True, owned=True)
    assert pkgversion.observed(ProbeFacts(health=Health.UP), me).version == versions.UNKNOWN
    assert pkgversion.mlx_lm(child.pid) is None  # gone
