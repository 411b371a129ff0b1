"""§14 right before each spawn: a changed Program file refuses the start, one event, no server."""

from __future__ import annotations

import hashlib
import shutil
import textwrap

import pytest

from reconciler.core.events import EventKind
from reconciler.core.outcomes import Guard
from reconciler.engine import loop
from reconciler.state.store import Store
from tests.loop.test_pass import NOW, free_port


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def site(tmp_path):
    """One managed llama.cpp role running Program `srv` (a copy of /bin/true) in tmp_path."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.gguf").write_bytes(b"GGUF")
    prog = tmp_path / "prog"
    prog.mkdir()
    shutil.copy("/bin/true", prog / "server")
    (prog / "server").chmod(0o755)
    port = free_port()
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "all.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: node}}
        spec:
          allowed_ports: {{from: {port}, to: {port}}}
          serve_programs: {{llamacpp: srv}}
          run_as: {{uid: 65534, gid: 65534}}
        ---
        apiVersion: reconciler/v1
        kind: Program
        metadata: {{name: srv}}
        spec:
          runtime: llamacpp
          version: b1
          root: {prog}
          entrypoint: server
          files: [{{path: server, size: {(prog / "server").stat().st_size},
                    sha256: {sha(prog / "server")}}}]
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          root: {tmp_path / "models"}
          shards: [{{path: tiny.gguf, size: 4, sha256: {sha(tmp_path / "models" / "tiny.gguf")}}}]
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: chat}}
        spec:
          runtime: llamacpp
          mode: managed
          model: tiny
          serve: {{port: {port}}}
        """))
    return tmp_path


def inputs(site, store) -> loop.PassInputs:
    return loop.PassInputs(paths=[str(site / "manifests")], store=store,
                           state_dir=str(site / "state"), clock=lambda: NOW)


def test_a_byte_appended_to_the_program_refuses_the_start(site):
    """§14: the pass looks at the Program before planning: the role is refused
    (program_unverified, both digests named), one refuse event, nothing spawned; the same
    refusal again is not news."""
    from reconciler.core.decisions import Reason, Verb

    exe = site / "prog" / "server"
    before = sha(exe)
    with open(exe, "ab") as f:
        f.write(b"\0")
    with Store(site / "state") as store:
        result = loop.apply_pass(inputs(site, store))
        (d,) = result.plan.decisions
        assert (d.verb, d.reason) == (Verb.REFUSE, Reason.PROGRAM_UNVERIFIED)
        assert f"the Program says {before}" in d.detail and f"its sha256 is {sha(exe)}" in d.detail
        assert result.outcomes == () and store.roles() == ()
        [event] = store.events("chat")
        assert event.kind is EventKind.REFUSE and "program srv: server has changed" in event.detail
        loop.apply_pass(inputs(site, store))
        assert len(store.events("chat")) == 1


def test_the_check_right_before_the_spawn_refuses_too(site):
    """§14: a file changed between the plan and the spawn is caught by the executor's hook:
    a refusal (guard program_unverified) naming both digests, no server started."""
    from reconciler.engine import act
    from reconciler.core.decisions import Verb

    exe = site / "prog" / "server"
    with Store(site / "state") as store:
        planned = loop.plan_pass(inputs(site, store))
        assert planned.plan.decisions[0].verb is Verb.START
        exe.write_bytes(exe.read_bytes() + b"\0")
        (outcome,) = act.act(planned.plan, planned.desired, store, root=str(site / "state"))
        assert outcome.refusal is not None and outcome.refusal.guard is Guard.PROGRAM_UNVERIFIED
        assert "server has changed: its sha256 is" in outcome.refusal.detail
        assert outcome.pid is None


def test_the_planner_refuses_a_changed_program_until_it_is_put_back(site):
    """§14: the planner refuses the role pass after pass (no start tried) while the file is
    changed; put back, the next plan (which writes nothing) and pass start the role."""
    from reconciler.core.decisions import Reason, Verb

    exe = site / "prog" / "server"
    original = exe.read_bytes()
    exe.write_bytes(original + b"\0")
    with Store(site / "state") as store:
        loop.apply_pass(inputs(site, store))
        events = len(store.events("chat"))
        result = loop.apply_pass(inputs(site, store))
        (d,) = result.plan.decisions
        assert (d.verb, d.reason) == (Verb.REFUSE, Reason.PROGRAM_UNVERIFIED)
        assert "program srv: server has changed" in d.detail and result.outcomes == ()
        planned = loop.plan_pass(inputs(site, store))
        assert planned.plan.decisions[0].reason is Reason.PROGRAM_UNVERIFIED
        exe.write_bytes(original)
        planned = loop.plan_pass(inputs(site, store))  # a plan sees it fixed, writes nothing
        assert planned.plan.decisions[0].verb is Verb.START
        result = loop.apply_pass(inputs(site, store))
        assert result.plan.decisions[0].verb is Verb.START
        assert len(store.events("chat")) > events
