"""The SQLite state store and the lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.models.modelstore import Stamp
from reconciler.core.errors import LockHeld, StateError
from reconciler.core.events import Event, EventKind
from reconciler.state.lock import Lock
from reconciler.state.store import SCHEMA_VERSION, Store


def record(**overrides) -> RoleRecord:
    values = dict(name="chat", instance_id="chat-0123abcd", runtime=Runtime.LLAMACPP,
                  mode=Mode.MANAGED, port=8090, pid=4242, create_time=1700000000.25,
                  launch_digest="d" * 64, launch_argv=("/bin/srv", "--port", "8090"),
                  restarts=2, started_at=1.5, exited_at=None, healthy_since=3.0,
                  terminal=Terminal.GAVE_UP, terminal_detail="crashed 2 times",
                  reserved=123456789)
    values.update(overrides)
    return flat_record(**values)


def test_role_records_round_trip(tmp_path):
    """Every field of a role record survives a write, a close and a reopen."""
    with Store(tmp_path) as store:
        store.put_role(record())
    with Store(tmp_path) as store:
        assert store.role("chat") == record()
        assert store.roles() == (record(),)
    loaded = record(name="llama", runtime=Runtime.OLLAMA, pid=None, create_time=None,
                    model_tag="llama3:8b", we_loaded=True)
    with Store(tmp_path) as store:
        store.put_role(loaded)
    with Store(tmp_path) as store:
        assert store.role("llama") == loaded and store.role("llama").we_loaded


def test_put_replaces_and_delete_forgets(tmp_path):
    """Writing a role again replaces it; deleting it leaves nothing."""
    with Store(tmp_path) as store:
        store.put_role(record())
        store.put_role(record(restarts=0, terminal=None))
        assert store.role("chat").restarts == 0 and store.role("chat").terminal is None
        store.delete_role("chat")
        assert store.role("chat") is None and store.roles() == ()


def test_database_is_wal_and_versioned(tmp_path):
    """state.db uses WAL and carries the schema version."""
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_schema_is_refused(tmp_path):
    """A database written by a newer reconciler is not silently downgraded."""
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StateError, match="newer reconciler"):
        Store(tmp_path)


def test_events_are_appended_and_filtered(tmp_path):
    """The event log keeps order and filters by role and time."""
    with Store(tmp_path) as store:
        store.add_event(Event(role="a", kind=EventKind.START, reason="missing", detail="pid 1",
                              ok=True, git_commit="abc", at=10.0))
        store.add_event(Event(role="b", kind=EventKind.STOP, reason="removed", ok=False, at=20.0))
        store.add_event(Event(role="a", kind=EventKind.KEEP, reason="in_sync", at=30.0))
        assert [e.kind for e in store.events()] == [EventKind.START, EventKind.STOP,
                                                    EventKind.KEEP]
        assert [e.at for e in store.events(role="a")] == [10.0, 30.0]
        assert [e.role for e in store.events(since=15.0)] == ["b", "a"]
        first = store.events()[0]
        assert (first.ok, first.git_commit, first.detail) == (True, "abc", "pid 1")
        assert store.events()[1].ok is False and store.events()[2].ok is None


def test_stamps_and_sticky_mismatches(tmp_path):
    """Model stamps replace as a set; a sticky mismatch stays until cleared."""
    with Store(tmp_path) as store:
        store.put_stamps("m", {"a.gguf": Stamp(size=1, mtime_ns=2, inode=3, ctime_ns=7, dev=8,
                                               sha256="f" * 64),
                               "b.gguf": Stamp(size=4, mtime_ns=5, inode=6, ctime_ns=7, dev=8,
                                               sha256="e" * 64)})
        store.put_stamps("m", {"a.gguf": Stamp(size=9, mtime_ns=2, inode=3, ctime_ns=7, dev=8,
                                               sha256="f" * 64)})
        assert store.get_stamps("m") == {"a.gguf": Stamp(size=9, mtime_ns=2, inode=3, ctime_ns=7,
                                                         dev=8, sha256="f" * 64)}
        assert store.get_stamps("other") == {}
        assert store.get_sticky("m") is None
        store.set_sticky("m", "model m: shard a.gguf hash mismatch")
    with Store(tmp_path) as store:
        assert store.get_sticky("m") == "model m: shard a.gguf hash mismatch"
        store.set_sticky("m", None)
        assert store.get_sticky("m") is None


def test_lock_is_exclusive_across_processes_and_names_the_holder(tmp_path):
    """A second process cannot take a held lock; the message names the holder's pid."""
    lock = Lock(tmp_path)
    lock.acquire()
    try:
        code = (
            "import sys\nfrom reconciler.state.lock import Lock\nfrom reconciler.core.errors import LockHeld\n"
            f"try:\n    Lock({str(tmp_path)!r}).acquire(timeout=0.2)\n"
            "except LockHeld as e:\n    print(e); sys.exit(7)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 7, out.stderr
        import os

        assert f"pid {os.getpid()}" in out.stdout and "another reconciler holds" in out.stdout
    finally:
        lock.release()
    other = Lock(tmp_path)
    other.acquire(timeout=0)
    other.release()


def test_lock_waits_up_to_its_timeout(tmp_path):
    """A held lock makes acquire wait about --lock-timeout before giving up."""
    import time

    first = Lock(tmp_path)
    first.acquire()
    second = Lock(tmp_path)
    started = time.monotonic()
    with pytest.raises(LockHeld):
        second.acquire(timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 2.0
    first.release()


def test_a_corrupt_database_is_a_store_error(tmp_path):
    """Garbage in state.db is reported as a StateError naming the file, not a sqlite trace."""
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match="state.db"):
        Store(tmp_path)
