"""`reconcile start` while the lock is held: queued in the store, handed to the daemon.

The daemon here is the real ``watch.Daemon`` in a child process with a fake
pass (no servers), holding the real lock; `start` runs in-process.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest

from reconciler import cli
from reconciler.world import procs
from reconciler.daemon import watch
from reconciler.commands import handoff
from reconciler.core.desired import Mode, Runtime
from reconciler.engine.loop import PassInputs
from reconciler.core.observed import RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.state.store import Store
from tests.support.fakes import FakePasses, bad, desired, good

REPO = Path(__file__).parents[2]

MANIFESTS = """\
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {name: n}
spec:
  allowed_ports: {from: 20000, to: 29999}
  serve_programs: {llamacpp: /bin/false}
---
apiVersion: reconciler/v1
kind: Model
metadata: {name: tiny}
spec:
  format: gguf
  root: /nonexistent-reconciler-test
  shards:
    - {path: tiny.gguf, size: 10, sha256: %s}
---
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {name: chat}
spec:
  runtime: llamacpp
  mode: managed
  model: tiny
  serve: {port: 20001}
""" % ("a" * 64)

#: A real Daemon whose fake pass logs a decision for each operator start it is given.
FAKE_WATCH = textwrap.dedent("""\
    import sys
    import time
    from reconciler.core.events import Event, EventKind
    from reconciler.state.lock import Lock
    from reconciler.state.store import Store
    from reconciler.daemon.watch import Daemon
    from reconciler.engine.loop import PassInputs
    from tests.support.fakes import desired, good

    state = sys.argv[1]
    lock = Lock(state)
    lock.acquire()
    with Store(state) as store:
        def fake_pass(inputs):
            for name in sorted(inputs.operator_starts):
                store.add_event(Event(role=name, kind=EventKind.START, reason="missing",
                                      detail="operator start", ok=True, at=time.time()))
            print("pass", sorted(inputs.operator_starts), flush=True)
            return good(desired("chat"))

        Daemon(PassInputs(paths=[state + "/none"], store=store, state_dir=state), resync=3600,
               apply_pass=fake_pass, watch_files=False).run()
    """)

#: Holds the lock and nothing else (a `--once` run, as far as `start` can tell).
PLAIN_HOLDER = textwrap.dedent("""\
    import sys, time
    from reconciler.state.lock import Lock
    Lock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(120)
    """)


def gave_up() -> RoleRecord:
    return flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                      mode=Mode.MANAGED, port=20001, restarts=2, exited_at=5.0,
                      terminal=Terminal.GAVE_UP, terminal_detail="crashed 2 times")


@pytest.fixture
def site(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "all.yaml").write_text(MANIFESTS)
    with Store(tmp_path / "state") as s:
        s.put_role(gave_up())
    return tmp_path


@pytest.fixture
def child(site):
    started: list[subprocess.Popen] = []

    def start(code: str, *argv: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code, str(site / "state"), *argv],
                                cwd=REPO, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() in ("pass []", "held")
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def reconcile(site, *args: str) -> int:
    return cli.main(["-f", str(site / "m"), "--state-dir", str(site / "state"), *args])


def store_of(site) -> Store:
    return Store(site / "state")


def test_start_hands_the_request_to_a_running_watch(site, child, capsys):
    """The daemon is woken, clears gave-up, passes the role as an operator start; exit 0."""
    daemon = child(FAKE_WATCH, "reconcile", "watch")
    assert reconcile(site, "start", "chat") == 0
    out = capsys.readouterr().out
    assert f"handed to `reconcile watch` (pid {daemon.pid})" in out, out
    assert "chat: operator-start (operator: cleared gave-up, restarts 2 → 0)" in out, out
    assert "chat: start done (missing: operator start)" in out, out
    assert daemon.stdout.readline().strip() == "pass ['chat']"
    assert daemon.poll() is None
    with store_of(site) as store:
        record = store.role("chat")
        assert record.terminal is None and record.restarts == 0 and record.exited_at is None
        assert store.queued_starts() == frozenset()


def _replicated(site) -> None:
    """The site's role with ``replicas: 3``, every instance gave up."""
    (site / "m" / "all.yaml").write_text(MANIFESTS.replace("  serve: {port: 20001}",
                                                           "  replicas: 3\n  serve: {port: 20001}"))
    with store_of(site) as store:
        for name in ("chat/1", "chat/2"):
            store.put_role(attrs.evolve(gave_up(), name=name, instance_id=f"{name}-1"))


def test_start_of_a_role_with_replicas_hands_every_instance_to_the_watch(site, child, capsys):
    """§12 `reconcile start chat` of a role with replicas: 3 starts its three instances, in
    the daemon's one pass."""
    _replicated(site)
    daemon = child(FAKE_WATCH, "reconcile", "watch")
    assert reconcile(site, "start", "chat") == 0
    assert daemon.stdout.readline().strip() == "pass ['chat', 'chat/1', 'chat/2']"
    with store_of(site) as store:
        assert [store.role(n).terminal for n in ("chat", "chat/1", "chat/2")] == [None] * 3


def test_start_of_one_instance_clears_that_instance_only(site, capsys):
    """§12 `reconcile start chat/1` is that instance's operator start; `reconcile start chat`
    then clears the others too (no daemon: the start runs its own pass)."""
    _replicated(site)
    reconcile(site, "start", "chat/1")
    with store_of(site) as store:
        assert [e.kind for e in store.events("chat/1")][:1] == ["operator-start"]
        for name in ("chat", "chat/2"):
            assert "operator-start" not in [e.kind for e in store.events(name)], name
        assert store.role("chat/2").terminal is Terminal.GAVE_UP
    reconcile(site, "start", "chat")
    with store_of(site) as store:
        for name in ("chat", "chat/2"):
            assert "operator-start" in [e.kind for e in store.events(name)], name
            assert store.role(name).terminal is None, name


def test_a_holder_that_is_not_a_watch_is_not_signalled_and_the_start_stays_queued(
        site, child, capsys):
    """A `--once`-like holder gets no SIGHUP; exit 1 says queued; the next --once takes it."""
    holder = child(PLAIN_HOLDER)
    assert reconcile(site, "start", "chat") == 1
    err = capsys.readouterr().err
    assert f"(pid {holder.pid}) and it is not a running `reconcile watch`" in err, err
    assert "queued" in err
    time.sleep(0.2)
    assert holder.poll() is None  # SIGHUP would have killed it (default action)
    with store_of(site) as store:
        assert store.queued_starts() == frozenset({"chat"})
        assert store.role("chat").terminal is Terminal.GAVE_UP
    holder.kill()
    holder.wait()

    reconcile(site, "--once")
    with store_of(site) as store:
        assert store.queued_starts() == frozenset()
        assert [e.kind for e in store.events("chat")][:1] == ["operator-start"]
        # Cleared by the operator start; the pass then refuses (the model is unverifiable).
        assert store.role("chat") == attrs.evolve(gave_up(), terminal=None, terminal_detail="",
                                                  restarts=0, exited_at=None)


def test_a_watch_that_does_not_answer_leaves_the_start_queued(site, child, monkeypatch, capsys):
    """No operator-start event within the wait: exit 1, and the request is still queued."""
    ignoring = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" + PLAIN_HOLDER
    holder = child(ignoring, "reconcile", "watch")
    monkeypatch.setattr(handoff, "WAIT", 0.5)
    assert reconcile(site, "start", "chat") == 1
    err = capsys.readouterr().err
    assert f"(pid {holder.pid}) holds the lock and did not take the start of chat" in err, err
    with store_of(site) as store:
        assert store.queued_starts() == frozenset({"chat"})


def test_each_daemon_pass_takes_the_queued_starts_first(tmp_path):
    """Queued starts are applied to the store and named in that pass only, both calls when invalid."""
    with Store(tmp_path / "state") as store:
        store.put_role(gave_up())
        passes = FakePasses(good(desired("chat")), bad("port out of range"))
        d = watch.Daemon(PassInputs(paths=[str(tmp_path / "m")], store=store,
                                    state_dir=str(tmp_path / "state")), resync=3600, apply_pass=passes,
                         watch_files=False)
        try:
            d.reconcile("start")
            assert passes.calls[-1].operator_starts == frozenset()
            store.request_start("chat")
            d.reconcile("SIGHUP")
        finally:
            d.close()
        # The invalid set ran again on the last good state: both calls carry the start.
        assert [c.operator_starts for c in passes.calls[1:]] == [frozenset({"chat"})] * 2
        assert passes.calls[-1].desired is not None
        record = store.role("chat")
        assert record.terminal is None and record.restarts == 0
        assert store.queued_starts() == frozenset()
        assert [e.kind for e in store.events("chat")] == ["operator-start"]


def test_a_quiet_pass_writes_nothing_to_the_store(tmp_path):
    """With no start queued, a daemon pass commits nothing (take_starts only reads)."""
    with Store(tmp_path / "state") as store:
        other = sqlite3.connect(tmp_path / "state" / "state.db")
        try:
            def version() -> int:
                # Changes when another connection commits to the database.
                return other.execute("PRAGMA data_version").fetchone()[0]

            d = watch.Daemon(PassInputs(paths=[str(tmp_path / "m")], store=store,
                                        state_dir=str(tmp_path / "state")), resync=3600,
                             apply_pass=FakePasses(good(desired("chat"))), watch_files=False)
            try:
                before = version()
                d.reconcile("start")
                d.reconcile("resync")
                assert version() == before
                store.request_start("chat")
                d.reconcile("SIGHUP")
                assert version() != before  # the probe sees a commit when there is one
            finally:
                d.close()
        finally:
            other.close()


def test_looks_like_watch_wants_a_live_reconcile_watch():
    """Only a live process running `reconcile … watch` qualifies; other commands do not."""
    code = "import time; time.sleep(60)"
    procs_ = [subprocess.Popen([sys.executable, "-c", code, *argv])
              for argv in (("-f", "m", "reconcile", "watch"), ("reconcile", "apply"), ())]
    try:
        watch_like, apply_like, plain = procs_
        assert procs.looks_like_watch(watch_like.pid)
        assert not procs.looks_like_watch(apply_like.pid)
        assert not procs.looks_like_watch(plain.pid)
        watch_like.send_signal(signal.SIGKILL)
        watch_like.wait()
        assert not procs.looks_like_watch(watch_like.pid)
        assert not procs.looks_like_watch(None)
    finally:
        for proc in procs_:
            proc.kill()
            proc.wait()


def test_a_start_taken_but_not_confirmed_exits_1_unless_ours_runs(tmp_path, capsys):
    """Taken, no decision logged in time: exit 1 'not confirmed'; 0 when our server of it runs."""
    from reconciler.commands.common import StartOptions
    from reconciler.commands.options import GlobalOptions
    from reconciler.core.events import Event, EventKind

    g, o = GlobalOptions(state_dir=str(tmp_path)), StartOptions(name="chat")
    taken = Event(id=7, at=1.0, role="chat", kind=EventKind.OPERATOR_START, reason="operator",
                  detail="cleared gave-up")
    assert handoff._report(g, o, 4242, 30.0, taken, []) == 1
    assert "not confirmed" in capsys.readouterr().err
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"PATH": "/usr/bin:/bin", "RECONCILER_INSTANCE": "chat-1"})
    try:
        assert wait_for_create_time(server.pid)
        with Store(tmp_path) as store:
            store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                                      mode=Mode.MANAGED, port=8090, pid=server.pid,
                                      create_time=procs.create_time(server.pid)))
        assert handoff._report(g, o, 4242, 30.0, taken, []) == 0
        assert f"it is running (pid {server.pid})" in capsys.readouterr().err
    finally:
        server.kill()
        server.wait()


def wait_for_create_time(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while procs.create_time(pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return procs.create_time(pid) is not None
