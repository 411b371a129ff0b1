"""``reconcile status`` and ``reconcile events`` (SHELL).

Status is observed, not remembered: it runs the same observe + plan a pass
would (without acting or taking the lock) and shows what each role *is*;
``--html FILE`` writes the status page (§11) of the same values once.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

import attrs

from reconciler.core.exitcodes import Exit
from reconciler.commands import common
from reconciler.core.units import format_size, parse_duration

_COLUMNS = ("ROLE", "RUNTIME", "MODE", "STATUS", "PID", "PORT", "RESTARTS", "MEMORY", "DETAIL")


def status_rows(result, store) -> list[dict]:
    """``status --json``'s rows (``report/snapshot.py`` makes them, for the page too)."""
    from reconciler.report import snapshot

    return snapshot.status_rows(result, store)


def device_rows(result) -> list[dict]:
    """§7.1 per declared device: memory, reserved in total, and per role reserved/used."""
    from reconciler.planner import placement

    if result.desired is None or not result.desired.node.devices:
        return []
    uses = placement.uses_by_pid(result.observed.device_use)
    return placement.device_table(result.desired.node, result.plan.decisions, uses)


def _print_devices(devices: list[dict]) -> None:
    print()
    for row in devices:
        who = ", ".join(
            f"{h['role']} {format_size(h['reserved'])}"
            + (f" (using {format_size(h['used'])})" if h["used"] is not None else "")
            for h in row["holders"]) or "nothing reserved"
        print(f"{row['device']:<8} {format_size(row['reserved'])} / {format_size(row['memory'])}"
              f" reserved: {who}")


def run_status(args) -> int:
    """What every role is; on an invalid manifest set, the problems first, then what runs.

    With broken manifests (a bad commit reached the node) the roles are those
    the store records and the world shows, observed against no desired
    state (nothing is planned for them), and the exit is 1.
    """
    from reconciler.engine import loop
    from reconciler.core.desired import Desired

    with common.open_store(args) as store:
        inputs = loop.PassInputs(paths=common.manifest_paths(args), store=store,
                                 state_dir=common.state_dir(args), node=common.node_choice(args))
        result = loop.plan_pass(inputs)
        problems = result.problems
        if problems:
            common.report_problems(problems)
            print("reconcile: manifests invalid: showing the last recorded state",
                  file=sys.stderr)
            recorded = loop.plan_pass(attrs.evolve(inputs, desired=Desired(), allow_empty=True))
            result = attrs.evolve(recorded, git_commit=result.git_commit)
        rows = status_rows(result, store)
        devices = device_rows(result)
        if problems:
            rows = [_as_recorded(row) for row in rows]
        if getattr(args, "html", None):
            from reconciler.report import snapshot

            taken = snapshot.take(result, store, problems=problems, applied=False)
            if problems:
                taken = attrs.evolve(taken, rows=tuple(_as_recorded(row) for row in taken.rows))
            failed = _write_html(args.html, taken)
            if failed:
                return failed
    code = Exit.ERROR if problems else Exit.OK
    if args.name:
        rows = [r for r in rows if r["role"] == args.name]
        if not rows:
            print(f"reconcile: error: no role {args.name!r}", file=sys.stderr)
            return Exit.ERROR
    if args.json:
        common.print_json({"roles": rows, "devices": devices, "git_commit": result.git_commit,
                           **({"problems": [str(p) for p in problems]} if problems else {})})
        return code
    table = [_COLUMNS] + [
        (r["role"], r["runtime"], r["mode"], r["status"], str(r["pid"] or "-"),
         str(r["port"] or "-"), str(r["restarts"]),
         format_size(r["reserved_bytes"]) if r["reserved_bytes"] else "-", r["detail"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if devices and not args.name:
        _print_devices(devices)
    return code


def _as_recorded(row: dict) -> dict:
    """A row observed against no desired state: what runs, and nothing planned for it."""
    exit_ = row["exit"]["summary"] if row.get("exit") else ""
    detail = "as recorded; nothing is planned while the manifests are invalid"
    return {**row, "next": None, "detail": f"{detail}; {exit_}" if exit_ else detail,
            **({"plan": "(nothing planned: the manifests are invalid)"} if "plan" in row else {})}


def _write_html(path: str, taken) -> int:
    """The page, once, to ``path`` (through a temporary file: a reader never sees half)."""
    import os

    from reconciler.report import page

    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page.render(taken, live=False))
        os.replace(tmp, path)
    except OSError as exc:
        print(f"reconcile: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return Exit.ERROR
    return 0


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
