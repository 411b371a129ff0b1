"""Model stamps in the SQLite state store: the ctime/device migration and lazy re-checks."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from reconciler.models.modelstore import Stamp, verify_model
from reconciler.core.observed import ModelState
from reconciler.state.store import Store
from reconciler.state.storeschema import MIGRATIONS, SCHEMA_VERSION

from .conftest import make_spec

W1, W2 = b"a" * 5000, b"b" * 7000


def v2_database(state_dir: Path, rows: list[tuple]) -> None:
    """A state.db as a schema-2 reconciler left it: stamps of (size, mtime_ns, inode) only."""
    state_dir.mkdir(exist_ok=True)
    db = sqlite3.connect(state_dir / "state.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(f"BEGIN;{MIGRATIONS[0]}{MIGRATIONS[1]}PRAGMA user_version = 2;COMMIT;")
    db.executemany("INSERT INTO stamps (model, path, size, mtime_ns, inode, sha256) "
                   "VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.close()


def old_row(spec, root: Path, index: int) -> tuple:
    """The stamp row an older reconciler would have stored for the spec's shard ``index``."""
    f = spec.shards[index]
    st = (root / f.path).stat()
    return (spec.name, f.path, st.st_size, st.st_mtime_ns, st.st_ino, f.sha256)


def test_old_stamps_migrate_and_re_hash_once(tmp_path, hashed):
    """A schema-2 database's stamps never count as "same": each file re-hashes once, then not."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    v2_database(tmp_path / "state", [old_row(spec, tmp_path / "m", 0),
                                     old_row(spec, tmp_path / "m", 1)])
    with Store(tmp_path / "state") as store:
        assert store.get_stamps("m") == {}
        lazy = verify_model(spec, store, full=False, first_in_process=False)
        assert lazy.state is ModelState.VERIFIED
        assert sorted(hashed) == ["a.gguf", "b.gguf"]
        hashed.clear()
        assert verify_model(spec, store, full=False, first_in_process=False).state \
            is ModelState.VERIFIED
        assert hashed == []
        got = store.get_stamps("m")["a.gguf"]
        st = (tmp_path / "m" / "a.gguf").stat()
        assert (got.ctime_ns, got.dev) == (st.st_ctime_ns, st.st_dev)
    db = sqlite3.connect(tmp_path / "state" / "state.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_an_old_stamp_cannot_hide_a_tamper(tmp_path, hashed):
    """Bytes changed after an old reconciler stamped them are caught by the lazy check."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    v2_database(tmp_path / "state", [old_row(spec, tmp_path / "m", 0)])
    p = tmp_path / "m" / "a.gguf"
    st = p.stat()
    with open(p, "r+b") as f:
        f.write(b"z")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with Store(tmp_path / "state") as store:
        check = verify_model(spec, store, full=False, first_in_process=False)
    assert (check.state, check.detail) == (ModelState.MISMATCH, "model m: shard a.gguf hash mismatch")


def test_the_stamps_migration_runs_twice_safely(tmp_path):
    """A 2 → 3 step run again (a racing first run) succeeds; the stamps it saw re-hash once."""
    stamp = Stamp(size=1, mtime_ns=2, inode=3, ctime_ns=4, dev=5, sha256="f" * 64)
    with Store(tmp_path) as store:
        store.put_stamps("m", {"a.gguf": stamp})
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        assert store.get_stamps("m") == {}
        store.put_stamps("m", {"a.gguf": stamp})
        assert store.get_stamps("m") == {"a.gguf": stamp}


def test_stamps_round_trip_with_large_device_numbers(tmp_path):
    """ctime and device are stored exactly, as 64-bit device numbers can be large."""
    stamp = Stamp(size=1, mtime_ns=2, inode=2**40, ctime_ns=1_700_000_000_123_456_789,
                  dev=2**50 + 7, sha256="f" * 64)
    with Store(tmp_path) as store:
        store.put_stamps("m", {"a.gguf": stamp})
    with Store(tmp_path) as store:
        assert store.get_stamps("m") == {"a.gguf": stamp}
