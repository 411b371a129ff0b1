"""The watch loop in-process with scripted passes: wake-ups, last good state, stop."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.report import logs, metrics
from reconciler.world import procs
from reconciler.daemon import passes, watch
from reconciler.daemon.filewatch import FileWatch
from reconciler.engine.loop import PassInputs
from reconciler.core.desired import Mode, Runtime, WantedState
from reconciler.core.observed import RoleRecord
from reconciler.core.observed import flat_record
from reconciler.state.store import Store
from tests.support.fakes import FakePasses, bad, desired, good, role_spec


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
        d = watch.Daemon(PassInputs(paths=[str(tmp_path / "manifests")], store=store,
                                    state_dir=str(tmp_path / "state")), apply_pass=passes, **kw)
        made.append(d)
        return d

    yield daemon
    for d in made:
        d.close()


@pytest.fixture
def log():
    """The daemon's log lines (DEBUG and up) in a string."""
    stream = io.StringIO()
    logs.setup("text", stream=stream, level=logging.DEBUG)
    yield stream
    for handler in list(logs.LOGGER.handlers):
        logs.LOGGER.removeHandler(handler)


def events(store, verb=None):
    return [e for e in store.events("manifests") if verb is None or e.kind == verb]


def test_next_deadline_prefers_the_earlier_of_resync_and_requeue():
    """The timer is the resync interval unless a requeue hint comes sooner (never below the floor)."""
    def at(last_end, resync, requeue):
        deadline = watch.next_deadline(last_end, resync, requeue)
        return deadline.at, str(deadline.why)

    assert at(100.0, 30.0, None) == (130.0, "resync")
    assert at(100.0, 30.0, 4.0) == (104.0, "requeue")
    assert at(100.0, 30.0, 45.0) == (130.0, "resync")
    assert at(100.0, 30.0, 0.0) == (100.0 + watch.MIN_REQUEUE, "requeue")


def test_invalid_edit_keeps_the_last_good_state_and_records_one_event(make, store):
    """Problems: the pass runs on the last good state; one event per distinct problem set; a fix resumes."""
    first, fixed = desired("chat"), desired("chat", "coder")
    passes = FakePasses(good(first), bad("port out of range"), bad("port out of range"),
                        good(fixed))
    d = make(passes)
    d.reconcile("start")
    assert d.last_good == first and len(passes.calls) == 1

    d.reconcile("manifests changed")
    assert passes.calls[-1].desired == first
    assert [e.reason for e in events(store, "invalid")] == ["problems"]
    assert "m/chat.yaml:3: $.spec.serve.port: port out of range" in events(store)[0].detail

    d.reconcile("resync")
    assert passes.calls[-1].desired == first
    assert len(events(store, "invalid")) == 1

    d.reconcile("manifests changed")
    assert d.last_good == fixed and passes.calls[-1].desired is None
    assert [e.kind for e in events(store)] == ["invalid", "valid"]


def test_invalid_manifests_without_a_good_state_do_nothing(make, store):
    """With no good state yet, an invalid set runs nothing and says so once."""
    passes = FakePasses(bad("broken"))
    d = make(passes)
    d.reconcile("start")
    d.reconcile("resync")
    assert all(c.desired is None for c in passes.calls) and len(passes.calls) == 2
    assert len(events(store, "invalid")) == 1 and "nothing changed" in events(store)[0].detail


def test_metrics_file_counts_problems_while_the_last_good_state_runs(make, tmp_path):
    """The metrics of an invalid edit show the problems and the last good state's roles."""
    target = tmp_path / "m.prom"
    d = make(FakePasses(good(desired("chat")), bad("a", "b")),
             metrics=metrics.DaemonMetrics(file=str(target)))
    d.reconcile("start")
    d.reconcile("manifests changed")
    fams = {f.name: f for f in text_string_to_metric_families(target.read_text())}
    assert fams["reconciler_manifest_problems"].samples[0].value == 2
    assert {s.labels["role"] for s in fams["reconciler_role_status"].samples} == {"chat"}


def families(text: str) -> dict:
    """Families by name → {labels without ``node``: value}; every sample names its node."""
    out = {}
    for f in text_string_to_metric_families(text):
        out[f.name] = {}
        for s in f.samples:
            assert s.labels.pop("node"), f"{f.name} without a node label"
            out[f.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_failing_pass_publishes_failure_with_the_last_known_roles(make, store, tmp_path):
    """A pass that raises: /metrics and file say success 0, its own time and duration, the last roles."""
    store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                              mode=Mode.MANAGED, restarts=3, reserved=1024))
    now, calls = [100.0], []

    def passes(inputs):
        calls.append(inputs)
        if len(calls) == 1:
            now[0] += 0.25
            return good(desired("chat"))
        now[0] += 1.5
        raise RuntimeError("a bug")

    target = tmp_path / "m.prom"
    server = metrics.DaemonMetrics(file=str(target))
    d = make(passes, metrics=server,
             monotonic=lambda: now[0], wall=lambda: 1_700_000_000.0 + now[0])
    d.reconcile("start")
    assert families(server.text())["reconciler_last_pass_success"] == {(): 1}

    d.reconcile("resync")
    assert target.read_text() == server.text()
    fams = families(server.text())
    assert fams["reconciler_last_pass_success"] == {(): 0}
    assert fams["reconciler_last_pass_timestamp_seconds"] == {(): 1_700_000_100.25}
    assert fams["reconciler_last_pass_duration_seconds"] == {(): 1.5}
    assert fams["reconciler_role_status"][(("role", "chat"), ("status", "running"))] == 1
    assert fams["reconciler_role_restarts"] == {(("role", "chat"),): 3}
    assert fams["reconciler_reserved_bytes"] == {(("role", "chat"),): 1024}
    assert fams["reconciler_manifest_problems"] == {(): 0}


def test_a_failure_on_the_last_good_state_publishes_its_problems_and_the_last_roles(make):
    """Invalid set, then the last-good pass raises: problems counted, last roles kept, success 0."""
    script = FakePasses(good(desired("chat")), bad("port out of range"))

    def passes(inputs):
        if inputs.desired is not None:
            raise RuntimeError("a bug")
        return script(inputs)

    server = metrics.DaemonMetrics()
    d = make(passes, metrics=server)
    d.reconcile("start")
    d.reconcile("manifests changed")
    fams = families(server.text())
    assert fams["reconciler_last_pass_success"] == {(): 0}
    assert fams["reconciler_manifest_problems"] == {(): 1}
    assert fams["reconciler_role_status"][(("role", "chat"), ("status", "running"))] == 1


def test_a_first_pass_that_fails_publishes_failure_from_the_store(make, store, tmp_path):
    """With no result yet, a raising pass publishes success 0 and the store's roles as unknown."""
    store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                              mode=Mode.MANAGED))

    def broken(inputs):
        raise RuntimeError("a bug")

    server = metrics.DaemonMetrics()
    d = make(broken, metrics=server)
    d.reconcile("start")
    fams = families(server.text())
    assert fams["reconciler_last_pass_success"] == {(): 0}
    assert fams["reconciler_role_status"][(("role", "chat"), ("status", "unknown"))] == 1


class BreakableStore:
    """The real store until ``broken``: then every use raises, as a failing database would."""

    def __init__(self, real: Store) -> None:
        self.real, self.broken = real, False

    def __getattr__(self, name: str):
        if self.broken:
            raise RuntimeError("database disk image is malformed")
        return getattr(self.real, name)


def test_a_store_failure_still_publishes_the_failed_pass(make, store, tmp_path, log):
    """The store itself fails (pass and metrics reads raise): success 0 is published anyway."""
    breakable = BreakableStore(store)
    target = tmp_path / "m.prom"
    server = metrics.DaemonMetrics(file=str(target))
    d = watch.Daemon(PassInputs(paths=[str(tmp_path / "manifests")], store=breakable,
                                state_dir=str(tmp_path / "state")),
                     apply_pass=FakePasses(good(desired("chat"))), resync=3600, watch_files=False, metrics=server)
    try:
        d.reconcile("start")
        assert families(target.read_text())["reconciler_last_pass_success"] == {(): 1}
        breakable.broken = True
        d.reconcile("resync")
    finally:
        d.close()
    for text in (server.text(), target.read_text()):
        fams = families(text)
        assert fams["reconciler_last_pass_success"] == {(): 0}
        assert fams["reconciler_role_status"][(("role", "chat"), ("status", "running"))] == 1
    assert "cannot read the store for the metrics" in log.getvalue()


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
        store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
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
    store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                              mode=Mode.MANAGED, pid=child.pid, create_time=ctime))
    d = make(FakePasses(good(desired("chat"))))
    d.reconcile("start")
    assert d.wait().reasons == ("requeue",)


def test_a_failing_pass_is_logged_and_retried(make, log, monkeypatch):
    """A pass that raises is logged with its traceback; the next pass runs on the retry timer."""
    monkeypatch.setattr(passes, "ERROR_RETRY", 0.05)
    calls = []

    def broken_once(inputs):
        calls.append(inputs)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        d.request_stop()
        return good(desired("chat"))

    d = make(broken_once, resync=2.0)  # no retry: the resync pass, and the log check fails
    assert d.run() == 0
    assert len(calls) == 2
    text = log.getvalue()
    assert re.search(r"error: the pass failed\nTraceback .*RuntimeError: a bug", text, re.S), text
    assert "pass (requeue)" in text.split("RuntimeError: a bug", 1)[1], text
    assert d.last_result is not None and d.passes == 2


def test_a_failing_pass_requeues_after_error_retry(make):
    """The retry hint after a pass that raised is ERROR_RETRY; no result is kept."""
    def broken(inputs):
        raise RuntimeError("a bug")

    d = make(broken)
    d.reconcile("start")
    assert d.policy.requeue == passes.ERROR_RETRY and d.last_result is None


def test_run_stops_on_request_and_leaves_servers_alone(make):
    """request_pass from a thread runs a pass; request_stop then ends run() with 0, no stop pass."""
    ran = [threading.Event(), threading.Event()]
    script = FakePasses(good(desired("chat")))

    def passes(inputs):
        result = script(inputs)
        ran[len(script.calls) - 1].set()
        return result

    def operator() -> None:
        # Each request waits for the pass before it: no two land in one wait, however slow.
        # (A request that ran no pass still ends in a stop, and the count below fails.)
        ran[0].wait(10)
        d.request_pass()
        ran[1].wait(10)
        d.request_stop()

    d = make(passes)
    helper = threading.Thread(target=operator)
    helper.start()
    assert d.run() == 0
    helper.join(10)
    assert len(script.calls) == 2
    assert all(c.desired is None for c in script.calls)


def test_stop_on_exit_stops_managed_roles_only(make):
    """--stop-on-exit: a last pass wants every managed role stopped and keeps adopted ones."""
    d0 = desired("chat")
    d0 = type(d0)(roles=d0.roles + (role_spec("ollama", 11434, Mode.ADOPTED),), node=d0.node)
    passes = FakePasses(good(d0))
    d = make(passes, stop_on_exit=True)
    threading.Timer(0.2, d.request_stop).start()
    assert d.run() == 0
    last = passes.calls[-1]
    states = {r.name: r.state for r in last.desired.roles}
    assert states == {"chat": WantedState.STOPPED, "ollama": WantedState.RUNNING}
    assert last.allow_empty is True


def test_signals_are_restored_after_run(make):
    """run() on the main thread restores the previous signal handlers when it returns."""
    before = signal.getsignal(signal.SIGTERM)
    d = make(FakePasses(good(desired("chat"))))
    threading.Timer(0.2, d.request_stop).start()
    assert d.run() == 0
    assert signal.getsignal(signal.SIGTERM) == before
    assert signal.set_wakeup_fd(-1) == -1


def test_held_signals_are_let_in_only_while_the_daemon_runs(make):
    """signals_held blocks the three signals; run() lets them in for its passes; the mask comes back."""
    def blocked() -> set[int]:
        return signal.pthread_sigmask(signal.SIG_BLOCK, []) & set(watch.SIGNALS)

    before = blocked()
    during: list[set[int]] = []

    def passes(inputs):
        during.append(blocked())
        d.request_stop()
        return good(desired("chat"))

    d = make(passes)
    with watch.signals_held():
        assert blocked() == set(watch.SIGNALS)
        assert d.run() == 0
        assert blocked() == set(watch.SIGNALS)
    assert during == [set()]
    assert blocked() == before


def watched_inodes() -> set[int]:
    """The inodes this process's inotify instances watch (``/proc/self/fdinfo``)."""
    found: set[int] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                text = info.read()
        except OSError:
            continue  # closed meanwhile
        inodes = re.findall(r"^inotify wd:\d+ ino:([0-9a-f]+)", text, re.M)
        found |= {int(ino, 16) for ino in inodes}
    return found


def wait_watching(*paths, timeout: float = 10.0) -> None:
    """Until the kernel has an inotify watch on every path: from then on no event is missed."""
    wanted = {os.stat(p).st_ino for p in paths}
    deadline = time.monotonic() + timeout
    while not wanted <= watched_inodes():
        assert time.monotonic() < deadline, f"no inotify watch on {paths} after {timeout}s"
        time.sleep(0.01)


def test_manifest_edits_notify_and_other_files_do_not(tmp_path):
    """A YAML write in the manifests tree notifies within a second; a stray .txt does not."""
    folder = tmp_path / "manifests"
    (folder / "sub").mkdir(parents=True)
    hits = threading.Event()
    files = FileWatch([str(folder)], hits.set)
    files.start()
    try:
        wait_watching(folder, folder / "sub")
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
    files = FileWatch([str(target)], hits.set)
    files.start()
    try:
        wait_watching(tmp_path)
        (tmp_path / "other.yaml").write_text("b: 1\n")
        assert not hits.wait(0.4)
        (tmp_path / ".all.yaml.tmp").write_text("a: 2\n")
        os.replace(tmp_path / ".all.yaml.tmp", target)
        assert hits.wait(2.0)
    finally:
        files.close()


def test_the_daemon_keeps_one_model_verifier_for_its_life(make):
    """§1.1: every pass gets the same verifier, so only the first pass hashes every byte."""
    passes = FakePasses(good(desired("chat")), good(desired("chat")), good(desired("chat")))
    d = make(passes)
    for _ in range(3):
        d.reconcile("resync")
    verifiers = {id(inputs.verifier) for inputs in passes.calls}
    assert len(passes.calls) == 3 and len(verifiers) == 1
    assert passes.calls[0].verifier is not None


def test_a_state_error_in_a_pass_is_one_log_line_and_a_retry(make, caplog):
    """A full disk under a running daemon: one error line naming it, no traceback, retry soon."""
    from reconciler.core.errors import StateError

    def broken(inputs):
        raise StateError("state store /s/state.db: database or disk is full; free space")

    d = make(broken)
    with caplog.at_level("ERROR"):
        d.reconcile("resync")
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == ("the pass failed: state store /s/state.db: database or disk "
                                   "is full; free space; retrying in 5s")
    assert not record.exc_info and d.policy.requeue == passes.ERROR_RETRY
