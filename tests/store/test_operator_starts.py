"""Operator starts in the store: the queue a `reconcile start` leaves for the lock holder."""

from __future__ import annotations

import sqlite3

from reconciler.core.desired import Mode, Runtime
from reconciler.core.events import Event, EventKind
from reconciler.core.observed import RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.state.lock import Lock
from reconciler.state.store import Store
from reconciler.state.storeschema import MIGRATIONS, SCHEMA_VERSION


def event(role: str, kind: EventKind, reason: str, *, at: float) -> Event:
    return Event(role=role, kind=kind, reason=reason, at=at)


def gave_up(**overrides) -> RoleRecord:
    values = dict(name="chat", instance_id="chat-0123abcd", runtime=Runtime.LLAMACPP,
                  mode=Mode.MANAGED, port=8090, pid=4242, create_time=1700000000.25,
                  restarts=3, started_at=1.5, exited_at=9.0, terminal=Terminal.GAVE_UP,
                  terminal_detail="crashed 3 times", reserved=0)
    values.update(overrides)
    return flat_record(**values)


def v1_database(state_dir) -> None:
    """A state.db exactly as a schema-1 reconciler left it, with one role in it."""
    state_dir.mkdir(exist_ok=True)
    db = sqlite3.connect(state_dir / "state.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(f"BEGIN;{MIGRATIONS[0]}PRAGMA user_version = 1;COMMIT;")
    db.execute("INSERT INTO roles (name, instance_id, runtime, mode, host, port, restarts, "
               "terminal, updated_at) VALUES ('chat', 'chat-1', 'llamacpp', 'managed', "
               "'127.0.0.1', 8090, 2, 'gave-up', 1.0)")
    db.close()


def tables(state_dir) -> set[str]:
    db = sqlite3.connect(state_dir / "state.db")
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()


def test_schema_2_adds_the_operator_starts_table():
    """Schema version 2 is one migration appended to the first (later ones follow it)."""
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 2
    assert "CREATE TABLE IF NOT EXISTS operator_starts" in MIGRATIONS[1]


def test_a_v1_database_migrates_to_v2_and_keeps_its_roles(tmp_path):
    """Opening a schema-1 state.db adds the queue, bumps the version and loses nothing."""
    v1_database(tmp_path)
    assert "operator_starts" not in tables(tmp_path)
    with Store(tmp_path) as store:
        record = store.role("chat")
        assert record is not None and record.restarts == 2
        assert record.terminal is Terminal.GAVE_UP
        store.request_start("chat")
        assert store.take_starts() == frozenset({"chat"})
    assert "operator_starts" in tables(tmp_path)
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_the_migration_is_idempotent(tmp_path):
    """A 1 → 2 step that finds its table already there (a racing first run) still succeeds."""
    with Store(tmp_path) as store:
        store.request_start("chat", at=5.0)
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        assert store.take_starts() == frozenset({"chat"})


def test_take_starts_reads_and_deletes_every_request_once(tmp_path):
    """Queued starts come back once, as a set (a repeated request counts once)."""
    with Store(tmp_path) as store:
        assert store.take_starts() == frozenset()
        store.request_start("chat")
        store.request_start("coder")
        store.request_start("chat")
        assert store.queued_starts() == frozenset({"chat", "coder"})
        assert store.take_starts() == frozenset({"chat", "coder"})
        assert store.take_starts() == frozenset() and store.queued_starts() == frozenset()


def test_a_request_from_another_connection_reaches_the_holder(tmp_path):
    """`start` writes through its own connection while the holder's store stays open."""
    with Store(tmp_path) as holder:
        with Store(tmp_path) as client:
            client.request_start("chat")
        assert holder.take_starts() == frozenset({"chat"})


def test_operator_start_clears_the_terminal_state_and_the_count(tmp_path):
    """§4: terminal state, restarts and the exit clock are reset; nothing else changes."""
    with Store(tmp_path) as store:
        store.put_role(gave_up())
        detail = store.operator_start("chat", at=50.0)
        assert detail == "cleared gave-up, restarts 3 → 0"
        assert store.role("chat") == gave_up(terminal=None, terminal_detail="", restarts=0,
                                             exited_at=None)
        [event] = store.events("chat")
        assert (event.kind, event.reason, event.detail, event.at) == (
            "operator-start", "operator", detail, 50.0)


def test_operator_start_of_an_unrecorded_role_only_records_the_event(tmp_path):
    """A role never recorded gets no record, only the operator-start event."""
    with Store(tmp_path) as store:
        assert store.operator_start("new") == "nothing to clear (no record yet)"
        assert store.role("new") is None
        assert [e.kind for e in store.events("new")] == ["operator-start"]


def test_events_after_an_id(tmp_path):
    """last_event_id marks the log; events(after_id=…) reads only what came later."""
    with Store(tmp_path) as store:
        assert store.last_event_id() == 0
        store.add_event(event("chat", EventKind.START, "missing", at=1.0))
        mark = store.last_event_id()
        # An earlier clock still counts: the log is ordered by id.
        store.add_event(event("chat", EventKind.KEEP, "in_sync", at=0.5))
        store.add_event(event("other", EventKind.KEEP, "in_sync", at=2.0))
        assert [e.kind for e in store.events("chat", after_id=mark)] == ["keep"]
        assert len(store.events(after_id=mark)) == 2


def test_lock_holder_names_the_pid_that_took_it(tmp_path):
    """The lock file names its holder; no file or no pid yet reads as None."""
    import os

    lock = Lock(tmp_path)
    assert lock.holder() is None
    lock.acquire()
    try:
        assert Lock(tmp_path).holder() == os.getpid()
    finally:
        lock.release()
    (tmp_path / "lock").write_text("")
    assert Lock(tmp_path).holder() is None
