"""A ``RoleRecord`` as a row of ``state.db``'s ``roles`` table, and back (PURE).

``row_of`` is what ``store.Store.put_role`` writes (enums as their text, tuples and
nested records as JSON, the record's parts as the flat columns they were in round 3:
``process`` as pid and create_time, ``load`` as model_tag and we_loaded), ``record_of``
what ``roles()`` reads back. A nested record
(``ExitInfo``, ``Liveness``) written by a newer reconciler keeps only the fields
this one knows: reading an old or newer database is never fatal. The SQL is
``store.py``'s, the schema ``storeschema.py``'s.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import attrs

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import (
    ExitInfo, Intent, Liveness, LoadedModel, RoleRecord, ServerProcess, Terminal)

#: The record's own columns; its parts are columns too (``process``: pid and
#: create_time; ``load``: model_tag and we_loaded), the schema of round 3 unchanged.
_PARTS = ("process", "load")
_ROLE_FIELDS = [f.name for f in attrs.fields(RoleRecord) if f.name not in _PARTS]


def row_of(record: RoleRecord) -> dict[str, Any]:
    """The columns of ``record``'s row (``updated_at`` is the store's: it reads the clock)."""
    values = attrs.asdict(record, recurse=False)
    del values["process"], values["load"]
    values["pid"], values["create_time"] = record.pid, record.create_time
    values["model_tag"] = record.model_tag
    values["launch_argv"] = json.dumps(list(record.launch_argv))
    values["we_loaded"] = int(record.we_loaded)
    values["runtime"] = str(record.runtime)
    values["mode"] = str(record.mode)
    values["terminal"] = str(record.terminal) if record.terminal else None
    values["exit"] = _exit_json(record.exit)
    values["liveness"] = json.dumps(attrs.asdict(record.liveness))
    values["intent"] = (json.dumps(attrs.asdict(record.intent), sort_keys=True)
                        if record.intent is not None else None)
    values["devices"] = json.dumps([list(p) for p in record.devices])
    return values


def record_of(row: Mapping[str, Any]) -> RoleRecord:
    """The ``RoleRecord`` a row of ``roles`` holds (a ``sqlite3.Row`` or any mapping)."""
    values = {k: row[k] for k in _ROLE_FIELDS}
    values["runtime"] = Runtime(values["runtime"])
    values["mode"] = Mode(values["mode"])
    values["terminal"] = Terminal(values["terminal"]) if values["terminal"] else None
    values["launch_argv"] = tuple(json.loads(values["launch_argv"] or "[]"))
    # The parts from their columns. A row no reconciler of today writes (a create
    # time without a pid, a load of ours without its tag) reads as the part absent
    # (neither ever counted: nothing reads a create time without its pid, and
    # ``ownership.our_load`` needs the tag): reading a database is never fatal.
    values["process"] = (ServerProcess(pid=row["pid"], create_time=row["create_time"])
                         if row["pid"] is not None else None)
    values["load"] = (LoadedModel(tag=row["model_tag"], ours=bool(row["we_loaded"]))
                      if row["model_tag"] else None)
    values["exit"] = _exit_value(values["exit"])
    values["liveness"] = _liveness_value(values["liveness"])
    values["intent"] = Intent(**json.loads(values["intent"])) if values["intent"] else None
    values["devices"] = tuple((str(i), int(b)) for i, b in json.loads(values["devices"] or "[]"))
    return RoleRecord(**values)


def _exit_json(info: ExitInfo | None) -> str | None:
    if info is None:
        return None
    return json.dumps({**attrs.asdict(info), "log": list(info.log)})


def _exit_value(text: str | None) -> ExitInfo | None:
    """A stored ``ExitInfo``; what a newer reconciler added to it is left out, not fatal."""
    if not text:
        return None
    raw = json.loads(text)
    known = {f.name for f in attrs.fields(ExitInfo)}
    values = {k: v for k, v in raw.items() if k in known}
    values["log"] = tuple(values.get("log") or ())
    return ExitInfo(**values)


def _liveness_value(text: str | None) -> Liveness:
    if not text:
        return Liveness()
    known = {f.name for f in attrs.fields(Liveness)}
    return Liveness(**{k: v for k, v in json.loads(text).items() if k in known})
