"""The state store (SHELL; the only module that imports sqlite3).

``state.db`` (SQLite, WAL) in the state directory remembers, per role, what
the reconciler needs between passes and across its own crashes (BEHAVIOUR §3):
the pid and create time it started, the launch digest, the restart count and
the clocks of the restart policy, terminal states, Ollama ``we_loaded`` and
the memory reserved in the ledger. Beside it: an append-only event log, and
the model verification stamps of §1.1, and the operator starts that a
``reconcile start`` queued for the daemon holding the lock.

The schema is versioned with ``PRAGMA user_version``; its steps are in
``storeschema.py``.

One writer at a time: ``lock.Lock`` holds ``<state dir>/lock`` for a whole
pass or the daemon's life. The one exception is brief and safe under WAL and
the busy timeout: ``reconcile start`` queues a request (``request_start``)
while a daemon holds the lock, and the daemon takes it (``take_starts``).

Failures are ``errors.StateError`` (the directory or the database cannot be
used: permissions, corruption, a newer schema, SQLite still locked after
``BUSY_TIMEOUT``), never a raw ``sqlite3`` or ``OSError``, so every command
can say it in one line.

A role's record as a row (and back) is ``storerows.py`` (PURE); the schema is
``storeschema.py``.

Size: one idea, state.db's one reader and writer: the only owner of sqlite3,
so every query of every table (roles, fetches, operator starts, events, stamps)
is here, each a few lines, beside the connection, the migration and the error
handling they all share.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ParamSpec, TypeVar

import attrs

from reconciler.core import events as ev
from reconciler.core.errors import StateError
from reconciler.core.events import Event, EventKind
from reconciler.core.observed import FetchRecord, RoleRecord
from reconciler.state import storerows
from reconciler.state.storeschema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:  # hashing models is not every pass's business: imported when stamps are read
    from reconciler.models.modelstore import Stamp

_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)

#: How long a statement waits for another connection's write lock (seconds).
BUSY_TIMEOUT = 30.0



def default_state_dir(environ: dict[str, str] | None = None) -> str:
    """``$RECONCILER_STATE_DIR``, else /var/lib/reconciler as root, else XDG."""
    env = os.environ if environ is None else environ
    if env.get("RECONCILER_STATE_DIR"):
        return env["RECONCILER_STATE_DIR"]
    if os.geteuid() == 0:
        return "/var/lib/reconciler"
    xdg = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(xdg) / "reconciler")


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _state_errors(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """A SQLite failure inside ``method`` becomes a ``StateError`` naming the database."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            store = args[0]
            raise StateError(f"state store {store.path}: {exc}"  # type: ignore[attr-defined]
                             f"{_way_back(exc, store.state_dir)}") from None  # type: ignore[attr-defined]

    return wrapper


#: The faults of the store's own world, and the way back each one names (README,
#: "When the reconciler's own world breaks"). Running servers are never touched:
#: a pass that cannot read or write its store acts on nothing it has not recorded.
_WAYS_BACK = {
    "SQLITE_FULL": "; its filesystem is full: free space there, and the next pass resumes",
    "SQLITE_IOERR": "; check its filesystem: the next pass resumes",
    "SQLITE_CORRUPT": ("; move it aside (e.g. state.db.corrupt): the next run starts a new "
                       "one and re-adopts the running servers by their marker"),
    "SQLITE_NOTADB": ("; move it aside (e.g. state.db.corrupt): the next run starts a new "
                      "one and re-adopts the running servers by their marker"),
    "SQLITE_READONLY_DBMOVED": ("; it was removed or moved while in use: restart the "
                                "reconciler, which re-adopts the running servers by their marker"),
}


def _way_back(exc: sqlite3.Error, state_dir: Path) -> str:
    """The way back for this SQLite error (its extended name, else its primary one)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) and _full(state_dir):
        # SQLite reports a full disk as an I/O error when the WAL index cannot grow.
        return f"; {state_dir} is on a full filesystem: free space there, and the next pass resumes"
    primary = "_".join(name.split("_")[:2])  # SQLITE_IOERR_WRITE → SQLITE_IOERR
    return _WAYS_BACK.get(name) or _WAYS_BACK.get(primary, "")


def _full(state_dir: Path) -> bool:
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return False
    return st.f_bavail == 0 or (st.f_favail == 0 and st.f_files > 0)


class Store:
    """The SQLite state of one state directory."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "state.db"
        try:
            # 0711: other users may not list the state, but the unprivileged uid a
            # managed server runs as must traverse it to reach <state>/instances/<id>.
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
        except OSError as exc:
            raise StateError(f"state directory {self.state_dir}: {exc.strerror or exc}") from None
        self._db = self._connect()
        try:
            self._prepare()
        except StateError:
            self._db.close()
            raise

    @_state_errors
    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)

    @_state_errors
    def _prepare(self) -> None:
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        version = self._version()
        while version < SCHEMA_VERSION:
            # One step, one transaction: a migration applies whole or not at all.
            # The version is read again under the write lock: another process may
            # have taken this step while we waited for it.
            with self._transaction():
                version = self._version()
                if version < SCHEMA_VERSION:
                    for statement in _statements(MIGRATIONS[version]):
                        self._apply(statement)
                    self._db.execute(f"PRAGMA user_version = {version + 1}")
            version = self._version()

    def _apply(self, statement: str) -> None:
        added = _ADD_COLUMN.match(statement)
        if added is not None:
            table, column = added.groups()
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column in columns:
                return
        self._db.execute(statement)

    def _version(self) -> int:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StateError(
                f"{self.path} has schema version {version}; this reconciler knows "
                f"up to {SCHEMA_VERSION} (a newer reconciler wrote it)"
            )
        return version

    def _transaction(self):
        return _Transaction(self._db)

    # ------------------------------------------------------------ roles

    @_state_errors
    def roles(self) -> tuple[RoleRecord, ...]:
        rows = self._db.execute("SELECT * FROM roles ORDER BY name").fetchall()
        return tuple(storerows.record_of(row) for row in rows)

    @_state_errors
    def role(self, name: str) -> RoleRecord | None:
        row = self._db.execute("SELECT * FROM roles WHERE name = ?", (name,)).fetchone()
        return storerows.record_of(row) if row else None

    @_state_errors
    def put_role(self, record: RoleRecord) -> None:
        values = storerows.row_of(record)
        values["updated_at"] = time.time()
        cols = ", ".join(values)
        marks = ", ".join(f":{k}" for k in values)
        self._db.execute(f"INSERT OR REPLACE INTO roles ({cols}) VALUES ({marks})", values)

    @_state_errors
    def delete_role(self, name: str) -> None:
        self._db.execute("DELETE FROM roles WHERE name = ?", (name,))

    # ------------------------------------------------------------ fetches (§1.6)

    @_state_errors
    def fetches(self) -> tuple[FetchRecord, ...]:
        rows = self._db.execute("SELECT * FROM fetches ORDER BY model").fetchall()
        return tuple(FetchRecord(**{k: row[k] for k in row.keys()}) for row in rows)

    @_state_errors
    def put_fetch(self, record: FetchRecord) -> None:
        values = attrs.asdict(record)
        cols, marks = ", ".join(values), ", ".join(f":{k}" for k in values)
        self._db.execute(f"INSERT OR REPLACE INTO fetches ({cols}) VALUES ({marks})", values)

    @_state_errors
    def delete_fetch(self, model: str) -> None:
        self._db.execute("DELETE FROM fetches WHERE model = ?", (model,))

    # ------------------------------------------------------------ operator starts

    @_state_errors
    def operator_start(self, name: str, at: float | None = None) -> str:
        """BEHAVIOUR §4 operator start: clear the terminal state, restarts → 0.

        The one thing besides ``stable_after`` that gives a role its restarts
        back. Records an ``operator-start`` event and returns its detail; the
        pass that follows must name the role in ``operator_starts``.
        """
        at = time.time() if at is None else at
        with self._transaction():
            record = self.role(name)
            if record is None:
                detail = "nothing to clear (no record yet)"
            else:
                self.put_role(attrs.evolve(record, terminal=None, terminal_detail="",
                                           restarts=0, exited_at=None))
                parts = [f"cleared {record.terminal}"] if record.terminal else []
                if record.restarts:
                    parts.append(f"restarts {record.restarts} → 0")
                detail = ", ".join(parts) or "nothing to clear"
            self.add_event(ev.operator_start(name, detail, at=at))
        return detail

    @_state_errors
    def request_start(self, name: str, at: float | None = None) -> None:
        """Queue an operator start for whoever holds the lock (its next pass takes it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO operator_starts (name, requested_at) VALUES (?, ?)",
            (name, time.time() if at is None else at),
        )

    @_state_errors
    def take_starts(self) -> frozenset[str]:
        """Every queued operator start, read and deleted in one transaction.

        Nothing queued (the usual pass) is a plain read: no write lock, no
        write, so a quiet daemon leaves the database alone.
        """
        if not self.queued_starts():
            return frozenset()
        with self._transaction():
            rows = self._db.execute("SELECT name FROM operator_starts").fetchall()
            if rows:
                self._db.execute("DELETE FROM operator_starts")
        return frozenset(row["name"] for row in rows)

    @_state_errors
    def queued_starts(self) -> frozenset[str]:
        """The operator starts still waiting for a pass (read only)."""
        rows = self._db.execute("SELECT name FROM operator_starts").fetchall()
        return frozenset(row["name"] for row in rows)

    # ------------------------------------------------------------ events

    @_state_errors
    def add_event(self, event: Event) -> None:
        """Append ``event`` as given (its ``id`` is ignored: the store numbers events)."""
        self._db.execute(
            "INSERT INTO events (at, role, verb, reason, detail, ok, git_commit) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (event.at, event.role, str(event.kind), event.reason, event.detail,
             None if event.ok is None else int(event.ok), event.git_commit),
        )

    @_state_errors
    def events(self, role: str | None = None, since: float | None = None,
               after_id: int | None = None) -> list[Event]:
        query, args = "SELECT * FROM events WHERE 1=1", []
        if role is not None:
            query += " AND role = ?"
            args.append(role)
        if since is not None:
            query += " AND at >= ?"
            args.append(since)
        if after_id is not None:
            query += " AND id > ?"
            args.append(after_id)
        rows = self._db.execute(query + " ORDER BY id", args).fetchall()
        return [self._event(row) for row in rows]

    @_state_errors
    def last_event_id(self) -> int:
        """The id of the newest event (0 for none): ``events(after_id=…)`` reads what follows."""
        return self._db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]

    @_state_errors
    def last_events(self) -> dict[str, Event]:
        """Each role's newest event, in one query."""
        rows = self._db.execute(
            "SELECT * FROM events WHERE id IN (SELECT MAX(id) FROM events GROUP BY role)"
        ).fetchall()
        return {row["role"]: self._event(row) for row in rows}

    @_state_errors
    def started_by(self, verbs: tuple[str, ...]) -> dict[str, str]:
        """Each role's git commit of its newest successful event among ``verbs`` (a start)."""
        marks = ", ".join("?" * len(verbs))
        rows = self._db.execute(
            "SELECT role, git_commit FROM events WHERE id IN (SELECT MAX(id) FROM events "
            f"WHERE verb IN ({marks}) AND ok = 1 GROUP BY role)", verbs).fetchall()
        return {row["role"]: row["git_commit"] for row in rows if row["git_commit"]}

    def _event(self, row: sqlite3.Row) -> Event:
        try:
            kind = EventKind(row["verb"])
        except ValueError:
            raise StateError(f"state store {self.path}: event {row['id']} has the unknown kind "
                             f"{row['verb']!r} (written by a newer reconciler?)") from None
        return Event(id=row["id"], at=row["at"], role=row["role"], kind=kind,
                     reason=row["reason"], detail=row["detail"],
                     ok=None if row["ok"] is None else bool(row["ok"]),
                     git_commit=row["git_commit"])

    # ------------------------------------------------------------ model stamps
    # (the StampStore protocol of reconciler.modelstore)

    @_state_errors
    def get_stamps(self, model: str) -> dict[str, Stamp]:
        from reconciler.models.modelstore import Stamp

        rows = self._db.execute(
            "SELECT * FROM stamps WHERE model = ? AND ctime_ns IS NOT NULL AND dev IS NOT NULL",
            (model,),
        ).fetchall()
        return {
            r["path"]: Stamp(size=r["size"], mtime_ns=r["mtime_ns"], inode=r["inode"],
                             ctime_ns=r["ctime_ns"], dev=r["dev"], sha256=r["sha256"])
            for r in rows
        }

    @_state_errors
    def put_stamps(self, model: str, stamps: dict[str, Stamp]) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM stamps WHERE model = ?", (model,))
            self._db.executemany(
                "INSERT INTO stamps (model, path, size, mtime_ns, inode, ctime_ns, dev, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(model, p, s.size, s.mtime_ns, s.inode, s.ctime_ns, s.dev, s.sha256)
                 for p, s in stamps.items()],
            )

    @_state_errors
    def sticky_mismatches(self) -> dict[str, str]:
        """Every model with a sticky mismatch, and its detail (for the pass's model checks)."""
        rows = self._db.execute("SELECT model, detail FROM sticky_mismatch").fetchall()
        return {row["model"]: row["detail"] for row in rows}

    @_state_errors
    def get_sticky(self, model: str) -> str | None:
        row = self._db.execute(
            "SELECT detail FROM sticky_mismatch WHERE model = ?", (model,)
        ).fetchone()
        return row["detail"] if row else None

    @_state_errors
    def set_sticky(self, model: str, detail: str | None) -> None:
        if detail is None:
            self._db.execute("DELETE FROM sticky_mismatch WHERE model = ?", (model,))
        else:
            self._db.execute(
                "INSERT OR REPLACE INTO sticky_mismatch (model, detail) VALUES (?, ?)",
                (model, detail),
            )


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


def _statements(script: str) -> list[str]:
    """A migration's statements (they hold no ``;`` inside, by construction)."""
    return [part.strip() for part in script.split(";") if part.strip()]
