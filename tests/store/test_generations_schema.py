"""Schema 4 (§3, §4): a record's generation, restarted_at and intent, written in one statement."""

from __future__ import annotations

import sqlite3

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import Intent, RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.state.store import Store
from reconciler.state.storeschema import MIGRATIONS, SCHEMA_VERSION


def record(**overrides) -> RoleRecord:
    values = dict(name="chat", instance_id="chat-0123abcd", runtime=Runtime.LLAMACPP,
                  mode=Mode.MANAGED, port=8090, pid=4242, create_time=1700000000.25,
                  launch_digest="d" * 64, launch_argv=("/bin/srv",), restarts=2,
                  terminal=Terminal.GAVE_UP, generation="g" * 64, restarted_at="2026-12-01",
                  intent=Intent(verb="restart", reason="spec_changed", instance_id="chat-4567cdef",
                                launch_digest="e" * 64, port=8091, at=12.5, stops=4242))
    values.update(overrides)
    return flat_record(**values)


def test_generation_and_intent_round_trip(tmp_path):
    """generation, restarted_at and the intent survive a write, a close and a reopen."""
    with Store(tmp_path) as store:
        store.put_role(record())
    with Store(tmp_path) as store:
        assert store.role("chat") == record()
        store.put_role(record(intent=None, generation=None, restarted_at=None))
    with Store(tmp_path) as store:
        got = store.role("chat")
        assert got is not None and (got.intent, got.generation, got.restarted_at) == (None, None, None)


def test_a_v3_database_migrates_to_v4_keeping_its_records(tmp_path):
    """Opening a schema-3 state.db adds the columns (empty) and keeps every record's fields."""
    with Store(tmp_path) as store:
        store.put_role(record(intent=None, generation=None, restarted_at=None))
    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript("""
        CREATE TABLE roles_v3 AS SELECT name, instance_id, runtime, mode, host, port, model_tag,
            pid, create_time, launch_digest, launch_argv, restarts, started_at, exited_at,
            healthy_since, terminal, terminal_detail, we_loaded, reserved, updated_at FROM roles;
        DROP TABLE roles;
        ALTER TABLE roles_v3 RENAME TO roles;
        PRAGMA user_version = 3;
    """)
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        got = store.role("chat")
    assert got == record(intent=None, generation=None, restarted_at=None)
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        columns = {row[1] for row in db.execute("PRAGMA table_info(roles)")}
        assert {"generation", "restarted_at", "intent"} <= columns
    finally:
        db.close()
    assert "roles_v4" in MIGRATIONS[3]
