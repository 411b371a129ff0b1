"""``reconcile status`` and ``reconcile events`` (SHELL).

Status is observed, not remembered: it runs the same observe + plan a pass
would (without acting or taking the lock) and shows what each role *is*.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

from reconciler.core.exitcodes import Exit
from reconciler.commands import common
from reconciler.core.units import format_size, parse_duration

_COLUMNS = ("ROLE", "RUNTIME", "MODE", "STATUS", "PID", "PORT", "RESTARTS", "MEMORY", "DETAIL")


def status_rows(result, store) -> list[dict]:
    records = {r.name: r for r in store.roles()}
    rows = []
    for d in result.plan.decisions:
        spec = result.desired.role(d.role) if result.desired else None
        record = records.get(d.role)
        obs = result.observed.role(d.role)
        pid = obs.process.pid if obs.process and obs.process.owned else None
        rows.append({
            "role": d.role,
            "runtime": str(spec.runtime if spec else record.runtime if record else d.runtime or ""),
            "mode": str(spec.mode if spec else record.mode if record else ""),
            "status": str(d.status),
            "detail": d.detail,
            "pid": pid,
            "port": spec.serve.port if spec else (record.port if record else d.port),
            "restarts": record.restarts if record else 0,
            "reserved_bytes": record.reserved if record else 0,
            "footprint_bytes": spec.memory.footprint if spec else 0,
            "next": f"{d.verb} ({d.reason})" if d.acts else None,
            "exit": _exit_json(record.exit if record and record.exit else obs.exit),
        })
    return rows


def _exit_json(info) -> dict | None:
    """How the role's last server ended (§4), with its log's last lines; None: it did not."""
    if info is None:
        return None
    from reconciler.planner import exitreasons

    return {"summary": exitreasons.summary(info), "known": info.known, "code": info.code,
            "signal": exitreasons.signal_name(info.signal) if info.signal is not None else None,
            "oom": info.oom or None, "log": list(info.log)}


def run_status(args) -> int:
    from reconciler.engine import loop

    with common.open_store(args) as store:
        result = loop.plan_pass(loop.PassInputs(
            paths=common.manifest_paths(args), store=store, state_dir=common.state_dir(args),
            node=common.node_choice(args)))
        if result.problems:
            return common.report_problems(result.problems)
        rows = status_rows(result, store)
    if args.name:
        rows = [r for r in rows if r["role"] == args.name]
        if not rows:
            print(f"reconcile: error: no role {args.name!r}", file=sys.stderr)
            return Exit.ERROR
    if args.json:
        common.print_json({"roles": rows, "git_commit": result.git_commit})
        return Exit.OK
    table = [_COLUMNS] + [
        (r["role"], r["runtime"], r["mode"], r["status"], str(r["pid"] or "-"),
         str(r["port"] or "-"), str(r["restarts"]),
         format_size(r["reserved_bytes"]) if r["reserved_bytes"] else "-", r["detail"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return Exit.OK


def run_events(args) -> int:
    since = None
    if args.since:
        try:
            since = time.time() - parse_duration(args.since)
        except ValueError as exc:
            print(f"reconcile: error: --since: {exc}", file=sys.stderr)
            return Exit.ERROR
    with common.open_store(args) as store:
        events = store.events(role=args.name, since=since)
    for e in events:
        if args.json:
            print(json.dumps({
                "id": e.id, "at": e.at, "role": e.role, "verb": e.kind, "reason": e.reason,
                "detail": e.detail, "ok": e.ok, "git_commit": e.git_commit,
            }))
        else:
            when = dt.datetime.fromtimestamp(e.at).isoformat(sep=" ", timespec="seconds")
            ok = "" if e.ok is None else (" ok" if e.ok else " FAILED")
            commit = f" @{e.git_commit[:10]}" if e.git_commit else ""
            print(f"{when}  {e.role:<16} {e.kind} ({e.reason}){ok}{commit}"
                  + (f": {e.detail}" if e.detail else ""))
    return Exit.OK
