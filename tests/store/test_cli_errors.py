"""An unusable state directory, store or lock reaches the operator as one line and exit 1."""

from __future__ import annotations

import sqlite3

import pytest

from reconciler import cli
from reconciler.state import store
from reconciler.core.errors import StateError
from reconciler.core.exitcodes import Exit
from reconciler.state.lock import Lock
from reconciler.state.store import Store


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.splitlines()


def test_a_state_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    """--state-dir naming a regular file: `status` and `--once` each say so in one line, exit 1."""
    state = tmp_path / "state"
    state.write_text("not a directory\n")
    code, lines = run(capsys, "--state-dir", str(state), "status")
    assert code == Exit.ERROR
    assert lines == [f"reconcile: error: state directory {state}: File exists"]
    code, lines = run(capsys, "--state-dir", str(state), "--once")
    assert code == Exit.ERROR
    assert len(lines) == 1 and lines[0].startswith(f"reconcile: error: lock {state}/lock: ")


def test_a_corrupt_store_is_one_line(tmp_path, capsys):
    """Garbage in state.db: one line naming the file and the way back, exit 1."""
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    code, lines = run(capsys, "--state-dir", str(tmp_path), "events")
    assert code == Exit.ERROR
    assert lines == [f"reconcile: error: state store {tmp_path}/state.db: "
                     "file is not a database; move it aside (e.g. state.db.corrupt): the next "
                     "run starts a new one and re-adopts the running servers by their marker"]


def test_a_database_locked_by_another_connection_is_one_line(tmp_path, capsys, monkeypatch):
    """SQLite still locked after the busy timeout: one line, exit 1, not a sqlite traceback."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.05)
    other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # a rollback-journal database: nobody else may read
        code, lines = run(capsys, "--state-dir", str(tmp_path), "events")
    finally:
        other.close()
    assert code == Exit.ERROR
    assert lines == [f"reconcile: error: state store {tmp_path}/state.db: database is locked"]


def test_a_write_blocked_mid_pass_is_a_state_error(tmp_path, monkeypatch):
    """A store method that meets a held write lock raises StateError, never sqlite3.Error."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.05)
    with Store(tmp_path) as s:
        other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StateError, match="database is locked"):
                s.request_start("chat")
        finally:
            other.close()
        s.request_start("chat")  # usable again once the other writer is gone
        assert s.queued_starts() == frozenset({"chat"})


def test_the_lock_held_is_one_line(tmp_path, capsys):
    """Another reconciler holding the lock: `--once` names it in one line and exits 1."""
    holder = Lock(tmp_path)
    holder.acquire()
    try:
        code, lines = run(capsys, "--state-dir", str(tmp_path), "-f", str(tmp_path), "--once")
    finally:
        holder.release()
    assert code == Exit.ERROR
    assert len(lines) == 1
    assert lines[0].startswith(f"reconcile: error: another reconciler holds {tmp_path}/lock (pid ")
