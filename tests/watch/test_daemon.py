"""The watch loop in-process with scripted passes: wake-ups, last good state, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler import procs, watch
from reconciler.model import Mode, Runtime, WantedState
from reconciler.observed import RoleRecord
from reconciler.store import Store
from tests.watch.fakes import FakePasses, bad, desired, good, role_spec


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "state") as s:
        yield s


@pytest.fixture
def make(tmp_path, store):
    made: list[watch.Daemon] = []

    def daemon(passes: FakePasses, **kw) -> watch.Daemon:
        kw.setdefault("resync", 3600)
        kw.setdefault("watch_files", False)
        d = watch.Daemon(paths=[str(tmp_path / "manifests")], store=store,
                         state_dir=str(tmp_path / "state"), run_pass=passes, **kw)
        made.append(d)
        return d

    yield daemon
    for d in made:
        d.close()


def events(store, verb=None):
    return [e for e in store.events("manifests") if verb is None or e.verb == verb]


def test_next_deadline_prefers_the_earlier_of_resync_and_requeue():
    """The timer is the resync interval unless a requeue hint comes sooner (never below the floor)."""
    assert watch.next_deadline(100.0, 30.0, None) == (130.0, "resync")
    assert watch.next_deadline(100.0, 30.0, 4.0) == (104.0, "requeue")
    assert watch.next_deadline(100.0, 30.0, 45.0) == (130.0, "resync")
    assert watch.next_deadline(100.0, 30.0, 0.0) == (100.0 + watch.MIN_REQUEUE, "requeue")


def test_invalid_edit_keeps_the_last_good_state_and_records_one_event(make, store):
    """Problems: the pass runs on the last good state; one event per distinct problem set; a fix resumes."""
    first, fixed = desired("chat"), desired("chat", "coder")
    passes = FakePasses(good(first), bad("port out of range"), bad("port out of range"),
                        good(fixed))
    d = make(passes)
    d.reconcile("start")
    assert d.last_good == first and len(passes.calls) == 1

    d.reconcile("manifests changed")
    assert passes.calls[-1]["desired_override"] == first
    assert [e.reason for e in events(store, "invalid")] == ["problems"]
    assert "m/chat.yaml:3: $.spec.serve.port: port out of range" in events(store)[0].detail

    d.reconcile("resync")
    assert passes.calls[-1]["desired_override"] == first
    assert len(events(store, "invalid")) == 1

    d.reconcile("manifests changed")
    assert d.last_good == fixed and "desired_override" not in passes.calls[-1]
    assert [e.verb for e in events(store)] == ["invalid", "valid"]


def test_invalid_manifests_without_a_good_state_do_nothing(make, store):
    """With no good state yet, an invalid set runs nothing and says so once."""
    passes = FakePasses(bad("broken"))
    d = make(passes)
    d.reconcile("start")
    d.reconcile("resync")
    assert all("desired_override" not in c for c in passes.calls) and len(passes.calls) == 2
    assert len(events(store, "invalid")) == 1 and "nothing changed" in events(store)[0].detail


def test_metrics_file_counts_problems_while_the_last_good_state_runs(make, tmp_path):
    """The metrics of an invalid edit show the problems and the last good state's roles."""
    target = tmp_path / "m.prom"
    d = make(FakePasses(good(desired("chat")), bad("a", "b")), metrics_file=str(target))
    d.reconcile("start")
    d.reconcile("manifests changed")
    fams = {f.name: f for f in text_string_to_metric_families(target.read_text())}
    assert fams["reconciler_manifest_problems"].samples[0].value == 2
    assert {s.labels["role"] for s in fams["reconciler_role_status"].samples} == {"chat"}


def test_requeue_hint_wakes_the_daemon_then(make):
    """A requeue hint wakes the daemon after that delay, long before the resync."""
    d = make(FakePasses(good(desired("chat"), requeue_after=0.15)))
    d.reconcile("start")
    t0 = time.monotonic()
    wake = d.wait()
    waited = time.monotonic() - t0
    assert wake.reasons == ("requeue",) and 0.14 <= waited < 1.0


def test_resync_timer_wakes_the_daemon(make):
    """With nothing else happening, the resync timer runs the next pass."""
    d = make(FakePasses(good(desired("chat"))), resync=0.2)
    d.reconcile("start")
    assert d.wait().reasons == ("resync",)


def test_a_server_exit_wakes_the_daemon_at_once(make, store):
    """A managed server recorded in the store that dies wakes the wait within 0.5 s."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        store.put_role(RoleRecord(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                                  mode=Mode.MANAGED, pid=child.pid,
                                  create_time=procs.create_time(child.pid)))
        d = make(FakePasses(good(desired("chat"))))
        d.reconcile("start")
        killed: list[float] = []

        def kill() -> None:
            killed.append(time.monotonic())
            child.kill()

        threading.Timer(0.2, kill).start()
        wake = d.wait()
        assert wake.reasons == ("chat exited",)
        assert killed and time.monotonic() - killed[0] < 0.5
    finally:
        child.kill()
        child.wait()


def test_a_server_gone_before_the_watch_starts_requeues_a_pass(make, store):
    """A recorded server already gone when the pass ends gets a pass at once, not at resync."""
    child = subprocess.Popen(["sleep", "60"])
    ctime = procs.create_time(child.pid)
    child.kill()
    child.wait()
    store.put_role(RoleRecord(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                              mode=Mode.MANAGED, pid=child.pid, create_time=ctime))
    d = make(FakePasses(good(desired("chat"))))
    d.reconcile("start")
    assert d.wait().reasons == ("requeue",)


def test_a_failing_pass_is_logged_and_retried(make):
    """A pass that raises does not end the daemon; it retries after ERROR_RETRY at most."""
    calls = []

    def broken(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("a bug")

    d = make(broken)
    d.reconcile("start")
    assert d._requeue == watch.ERROR_RETRY and d.last_result is None


def test_run_stops_on_request_and_leaves_servers_alone(make):
    """request_stop ends run() with 0 after the pass; no stop pass runs by default."""
    passes = FakePasses(good(desired("chat")))
    d = make(passes)
    threading.Timer(0.2, d.request_pass).start()
    threading.Timer(0.4, d.request_stop).start()
    assert d.run() == 0
    assert len(passes.calls) == 2
    assert all("desired_override" not in c for c in passes.calls)


def test_stop_on_exit_stops_managed_roles_only(make):
    """--stop-on-exit: a last pass wants every managed role stopped and keeps adopted ones."""
    d0 = desired("chat")
    d0 = type(d0)(roles=d0.roles + (role_spec("ollama", 11434, Mode.ADOPTED),), node=d0.node)
    passes = FakePasses(good(d0))
    d = make(passes, stop_on_exit=True)
    threading.Timer(0.2, d.request_stop).start()
    assert d.run() == 0
    last = passes.calls[-1]
    states = {r.name: r.state for r in last["desired_override"].roles}
    assert states == {"chat": WantedState.STOPPED, "ollama": WantedState.RUNNING}
    assert last["allow_empty"] is True


def test_signals_are_restored_after_run(make):
    """run() on the main thread restores the previous signal handlers when it returns."""
    before = signal.getsignal(signal.SIGTERM)
    d = make(FakePasses(good(desired("chat"))))
    threading.Timer(0.2, d.request_stop).start()
    assert d.run() == 0
    assert signal.getsignal(signal.SIGTERM) == before
    assert signal.set_wakeup_fd(-1) == -1


def test_manifest_edits_notify_and_other_files_do_not(tmp_path):
    """A YAML write in the manifests tree notifies within a second; a stray .txt does not."""
    folder = tmp_path / "manifests"
    (folder / "sub").mkdir(parents=True)
    hits = threading.Event()
    files = watch.FileWatch([str(folder)], hits.set)
    files.start()
    try:
        time.sleep(0.2)  # inotify watches are being set up by the helper thread
        (folder / "notes.txt").write_text("x")
        assert not hits.wait(0.5)
        (folder / "sub" / "chat.yaml").write_text("kind: x\n")
        assert hits.wait(2.0)
    finally:
        files.close()


def test_a_single_manifest_file_is_watched_through_rename(tmp_path):
    """Watching one file survives an editor's write-to-temp-then-rename."""
    target = tmp_path / "all.yaml"
    target.write_text("a: 1\n")
    hits = threading.Event()
    files = watch.FileWatch([str(target)], hits.set)
    files.start()
    try:
        time.sleep(0.2)
        (tmp_path / "other.yaml").write_text("b: 1\n")
        assert not hits.wait(0.4)
        (tmp_path / ".all.yaml.tmp").write_text("a: 2\n")
        os.replace(tmp_path / ".all.yaml.tmp", target)
        assert hits.wait(2.0)
    finally:
        files.close()
