"""``reconcile events [NAME] [--since DURATION] [--json]``: the event log (SHELL).

A read of the state store and nothing else (no manifests, no probe), so it
stays quick beside a running daemon; one line per event, oldest first, or
one JSON object per line.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

import attrs

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.errors import shown, shown_json
from reconciler.core.exitcodes import Exit
from reconciler.core.units import parse_duration


@attrs.frozen(kw_only=True)
class EventsOptions:
    name: str | None = None
    since: str | None = None
    json: bool = False


def run(g: GlobalOptions, o: EventsOptions) -> int:
    since = None
    if o.since:
        try:
            since = time.time() - parse_duration(o.since)
        except ValueError as exc:
            print(f"reconcile: error: --since: {exc}", file=sys.stderr)
            return Exit.ERROR
    with common.open_store(g) as store:
        events = store.events(role=o.name, since=since)
    for e in events:
        if o.json:
            print(shown_json(json.dumps({
                "id": e.id, "at": e.at, "role": e.role, "verb": e.kind, "reason": e.reason,
                "detail": e.detail, "ok": e.ok, "git_commit": e.git_commit,
            })))
        else:
            when = dt.datetime.fromtimestamp(e.at).isoformat(sep=" ", timespec="seconds")
            ok = "" if e.ok is None else (" ok" if e.ok else " FAILED")
            commit = f" @{e.git_commit[:10]}" if e.git_commit else ""
            print(shown(f"{when}  {e.role:<16} {e.kind} ({e.reason}){ok}{commit}"
                        + (f": {e.detail}" if e.detail else "")))
    return Exit.OK
