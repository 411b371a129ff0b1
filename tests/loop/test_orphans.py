"""§4 orphans: a server of ours by proof (marker, uid, cwd under this data_root, group leader)
that no role wants is stopped with reason ``orphan``; nothing else is ever touched."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import psutil
import pytest

from reconciler.engine import loop
from reconciler.world import procs
from reconciler.platform import portable
from reconciler.core.decisions import Reason, Verb
from reconciler.core.ownership import MARKER_ENV
from reconciler.state.store import Store

NOW = 1_700_000_000.0
SLEEPER = ["/bin/sleep", "60"]
NOBODY = 65534


@pytest.fixture
def site(tmp_path):
    """A manifest set whose only role is stopped, and the node's data root."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "all.yaml").write_text(textwrap.dedent("""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {name: node}
        spec:
          allowed_ports: {from: 8000, to: 8999}
          serve_programs: {llamacpp: /usr/bin/true}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {name: chat}
        spec: {runtime: llamacpp, mode: adopted, serve: {port: 8999}, state: stopped}
        """))
    root = tmp_path / "state" / "instances"
    root.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    return tmp_path


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def _run(children, cwd, instance, *, leader=True, user=None) -> subprocess.Popen:
    os.makedirs(cwd, exist_ok=True)
    os.chmod(cwd, 0o755)
    env = {"PATH": "/usr/bin:/bin", MARKER_ENV: instance}
    child = subprocess.Popen(SLEEPER, cwd=cwd, env=env, start_new_session=leader, user=user)
    children.append(child)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until exec has set the environment we look at
        try:
            if psutil.Process(child.pid).environ().get(MARKER_ENV) == instance:
                break
        except psutil.Error:
            pass
        time.sleep(0.02)
    return child


def _inputs(site, store) -> loop.PassInputs:
    return loop.PassInputs(paths=[str(site / "manifests")], store=store,
                           state_dir=str(site / "state"), clock=lambda: NOW)


def test_find_ours_needs_every_proof(site, children):
    """Marker + leader + uid + cwd in this data_root: found; missing any one: not ours."""
    root = str(site / "state" / "instances")
    ours = _run(children, f"{root}/old-0000aaaa", "old-0000aaaa")
    not_leader = _run(children, f"{root}/b-0000bbbb", "b-0000bbbb", leader=False)
    other_node = _run(children, f"{site}/elsewhere/c-0000cccc", "c-0000cccc")
    wrong_marker = _run(children, f"{root}/d-0000dddd", "e-0000eeee")
    wrong_uid = _run(children, f"{root}/f-0000ffff", "f-0000ffff", user=NOBODY)
    found = {pid: iid for pid, _, iid, _, _ in procs.find_ours(root, os.geteuid())}
    assert found == {ours.pid: "old-0000aaaa"}
    assert {not_leader.pid, other_node.pid, wrong_marker.pid, wrong_uid.pid}.isdisjoint(found)


def test_find_ours_passes_over_what_a_record_names(site, children, monkeypatch):
    """``known`` (pid, create time) → passed over before its proof is read; the rest as before."""
    root = str(site / "state" / "instances")
    recorded = _run(children, f"{root}/old-0000aaaa", "old-0000aaaa")
    unrecorded = _run(children, f"{root}/new-0000bbbb", "new-0000bbbb")
    asked, read = [], []
    real_environ = portable.psutil.Process.environ

    def environ(self):
        read.append(self.pid)
        return real_environ(self)

    monkeypatch.setattr(portable.psutil.Process, "environ", environ)

    def known(pid: int, ctime: float) -> bool:
        asked.append(pid)
        return pid == recorded.pid and ctime == procs.create_time(recorded.pid)

    found = {pid: iid for pid, _, iid, _, _ in procs.find_ours(root, os.geteuid(), known=known)}
    assert found == {unrecorded.pid: "new-0000bbbb"}
    assert {recorded.pid, unrecorded.pid} <= set(asked)
    assert recorded.pid not in read and unrecorded.pid in read


def test_orphan_is_stopped_and_forged_markers_are_left_alone(site, children):
    """An applying pass stops the proven orphan (reason orphan, an event) and nothing forged."""
    root = str(site / "state" / "instances")
    orphan = _run(children, f"{root}/old-0000aaaa", "old-0000aaaa")
    forged = [
        _run(children, f"{root}/b-0000bbbb", "b-0000bbbb", leader=False),
        _run(children, f"{site}/elsewhere/c-0000cccc", "c-0000cccc"),
        _run(children, f"{root}/f-0000ffff", "f-0000ffff", user=NOBODY),
    ]
    with Store(site / "state") as store:
        planned = loop.plan_pass(_inputs(site, store))
        stops = [(d.role, d.verb, d.reason, d.pid) for d in planned.plan.decisions
                 if d.reason is Reason.ORPHAN]
        assert stops == [("old-0000aaaa", Verb.STOP, Reason.ORPHAN, orphan.pid)]
        result = loop.apply_pass(_inputs(site, store))
        outcome = next(o for o in result.outcomes if o.role == "old-0000aaaa")
        assert outcome.ok and outcome.exited
        assert orphan.wait(timeout=5) is not None
        events = [e for e in store.events() if e.role == "old-0000aaaa"]
        assert [(e.reason, e.ok) for e in events] == [("orphan", True)]
    assert all(child.poll() is None for child in forged), "a forged marker was signalled"
    # The orphan's directory goes with it; the forged ones' directories are in use.
    assert not os.path.exists(f"{root}/old-0000aaaa")
    assert os.path.isdir(f"{root}/b-0000bbbb") and os.path.isdir(f"{root}/f-0000ffff")


def test_orphan_stop_rechecks_the_proof(site, children):
    """Between plan and signal the proof is asked again: a pid that no longer proves itself is spared."""
    root = str(site / "state" / "instances")
    orphan = _run(children, f"{root}/old-0000aaaa", "old-0000aaaa")
    ctime = psutil.Process(orphan.pid).create_time()
    assert procs.proves_ours(orphan.pid, ctime, "old-0000aaaa", root, os.geteuid())
    assert not procs.proves_ours(orphan.pid, ctime, "old-0000aaaa", f"{site}/other", os.geteuid())
    assert not procs.proves_ours(orphan.pid, ctime, "old-0000aaaa", root, NOBODY)
    assert not procs.proves_ours(orphan.pid, ctime + 5, "old-0000aaaa", root, os.geteuid())
