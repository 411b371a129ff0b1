"""The schema of ``state.db``: one SQL script per version step (PURE: text only).

``MIGRATIONS[i]`` takes a database from ``PRAGMA user_version`` ``i`` to
``i + 1``; ``store.Store`` applies the missing steps, each in one transaction,
statement by statement (an ``ADD COLUMN`` already there is skipped, so a step
replayed after a racing run still succeeds). Append a step; never edit one
that has shipped: databases in the field have already run it.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 0 → 1: the first schema (IF NOT EXISTS: two first runs may race to create it).
    """
    CREATE TABLE IF NOT EXISTS roles (
        name TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL,
        runtime TEXT NOT NULL,
        mode TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        model_tag TEXT,
        pid INTEGER,
        create_time REAL,
        launch_digest TEXT,
        launch_argv TEXT NOT NULL DEFAULT '[]',
        restarts INTEGER NOT NULL DEFAULT 0,
        started_at REAL,
        exited_at REAL,
        healthy_since REAL,
        terminal TEXT,
        terminal_detail TEXT NOT NULL DEFAULT '',
        we_loaded INTEGER NOT NULL DEFAULT 0,
        reserved INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        role TEXT NOT NULL,
        verb TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        ok INTEGER,
        git_commit TEXT
    );
    CREATE INDEX IF NOT EXISTS events_by_role ON events (role, at);
    CREATE TABLE IF NOT EXISTS stamps (
        model TEXT NOT NULL,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        inode INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        PRIMARY KEY (model, path)
    );
    CREATE TABLE IF NOT EXISTS sticky_mismatch (
        model TEXT PRIMARY KEY,
        detail TEXT NOT NULL
    );
    """,
    # 1 → 2: operator starts queued by `reconcile start` for the lock holder.
    """
    CREATE TABLE IF NOT EXISTS operator_starts (
        name TEXT PRIMARY KEY,
        requested_at REAL
    );
    """,
    # 2 → 3: stronger model stamps, with ctime and device. Rows from before get
    # NULL there and are never read back as stamps: their files re-hash once.
    # A rebuild, not ALTER TABLE ADD COLUMN, so that a racing second run of the
    # step succeeds too (it only costs that race's stamps one more re-hash).
    """
    CREATE TABLE IF NOT EXISTS stamps_v3 (
        model TEXT NOT NULL,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        inode INTEGER NOT NULL,
        ctime_ns INTEGER DEFAULT NULL,
        dev INTEGER DEFAULT NULL,
        sha256 TEXT NOT NULL,
        PRIMARY KEY (model, path)
    );
    INSERT OR IGNORE INTO stamps_v3 (model, path, size, mtime_ns, inode, sha256)
        SELECT model, path, size, mtime_ns, inode, sha256 FROM stamps;
    DROP TABLE stamps;
    ALTER TABLE stamps_v3 RENAME TO stamps;
    """,
    # 3 → 4: generations and intents (§3, §4): the generation a record's count
    # and holds belong to, its restarted_at, and a pass's unfinished work (JSON).
    # A rebuild, like 2 → 3, so that a racing second run of the step succeeds too.
    """
    CREATE TABLE IF NOT EXISTS roles_v4 (
        name TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL,
        runtime TEXT NOT NULL,
        mode TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        model_tag TEXT,
        pid INTEGER,
        create_time REAL,
        launch_digest TEXT,
        launch_argv TEXT NOT NULL DEFAULT '[]',
        restarts INTEGER NOT NULL DEFAULT 0,
        started_at REAL,
        exited_at REAL,
        healthy_since REAL,
        terminal TEXT,
        terminal_detail TEXT NOT NULL DEFAULT '',
        we_loaded INTEGER NOT NULL DEFAULT 0,
        reserved INTEGER NOT NULL DEFAULT 0,
        generation TEXT DEFAULT NULL,
        restarted_at TEXT DEFAULT NULL,
        intent TEXT DEFAULT NULL,
        updated_at REAL NOT NULL
    );
    INSERT OR IGNORE INTO roles_v4 (name, instance_id, runtime, mode, host, port, model_tag,
        pid, create_time, launch_digest, launch_argv, restarts, started_at, exited_at,
        healthy_since, terminal, terminal_detail, we_loaded, reserved, updated_at)
        SELECT name, instance_id, runtime, mode, host, port, model_tag, pid, create_time,
        launch_digest, launch_argv, restarts, started_at, exited_at, healthy_since, terminal,
        terminal_detail, we_loaded, reserved, updated_at FROM roles;
    DROP TABLE roles;
    ALTER TABLE roles_v4 RENAME TO roles;
    """,
    # 4 → 5: why the last server of a role ended (§4), and its liveness counters
    # (§4.1), each a JSON object. A column already there is not added again
    # (``_apply``): a step replayed after a racing run still succeeds.
    """
    ALTER TABLE roles ADD COLUMN exit TEXT;
    ALTER TABLE roles ADD COLUMN liveness TEXT;
    """,
    # 5 → 6: the devices of the last launch and the bytes reserved on each
    # (a JSON list of [device id, bytes]).
    """
    ALTER TABLE roles ADD COLUMN devices TEXT;
    """,
    # 6 → 7: detached Model fetches (§1.6), recorded like servers: the row (pid NULL,
    # the intent) is written before the spawn, the pid right after it.
    """
    CREATE TABLE IF NOT EXISTS fetches (
        model TEXT PRIMARY KEY,
        generation TEXT NOT NULL,
        pid INTEGER,
        create_time REAL,
        started_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'running',
        detail TEXT NOT NULL DEFAULT '',
        done_at_start INTEGER NOT NULL DEFAULT 0
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
