"""``reconcile status`` (SHELL; ``events`` is ``commands/events.py``).

Status is observed, not remembered: it runs the same observe + plan a pass
would (without acting or taking the lock) and shows what each role *is*;
``--html FILE`` writes the status page (§11) of the same values once.
"""

from __future__ import annotations

import os
import sys

import attrs

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.desired import Desired
from reconciler.core.instances import group_of, replica_of
from reconciler.core.exitcodes import Exit
from reconciler.core.units import format_size
from reconciler.engine import loop
from reconciler.planner import placement
from reconciler.report import snapshot


@attrs.frozen(kw_only=True)
class StatusOptions:
    name: str | None = None
    json: bool = False
    html: str | None = None


_COLUMNS = ("ROLE", "RUNTIME", "MODE", "STATUS", "PID", "PORT", "RESTARTS", "MEMORY", "DETAIL")


def status_rows(result, store) -> list[dict]:
    """``status --json``'s rows (``report/snapshot.py`` makes them, for the page too)."""
    return snapshot.status_rows(result, store)


def device_rows(result) -> list[dict]:
    """§7.1 per declared device: memory, reserved in total, and per role reserved/used."""
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


def run_status(g: GlobalOptions, o: StatusOptions) -> int:
    """What every role is; on an invalid manifest set, the problems first, then what runs.

    With broken manifests (a bad commit reached the node) the roles are those
    the store records and the world shows, observed against no desired
    state (nothing is planned for them), and the exit is 1.
    """
    with common.open_store(g) as store:
        inputs = common.pass_inputs(g, store)
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
        if o.html:
            taken = snapshot.take(result, store, problems=problems, applied=False)
            if problems:
                taken = attrs.evolve(taken, rows=tuple(_as_recorded(row) for row in taken.rows))
            failed = _write_html(o.html, taken)
            if failed:
                return failed
    code = Exit.ERROR if problems else Exit.OK
    if o.name:
        rows = [r for r in rows if r["role"] == o.name]
        if not rows:
            print(f"reconcile: error: no role {o.name!r}", file=sys.stderr)
            return Exit.ERROR
    if o.json:
        common.print_json({"roles": rows, "devices": devices, "git_commit": result.git_commit,
                           **({"rollout": list(result.rollout)} if result.rollout else {}),
                           **({"problems": [str(p) for p in problems]} if problems else {})})
    else:
        _print_table(rows)
        if devices and not o.name:
            _print_devices(devices)
        if result.rollout and not o.name:  # §13 this node's place in each rollout
            common.print_text("\n" + "\n".join(result.rollout))
    return code


def _print_table(rows: list[dict]) -> None:
    # §14 a PROGRAM column (name@version) once any role runs a Program; a path shows "-".
    pinned = any(r.get("program") for r in rows)
    columns = _COLUMNS[:2] + ("PROGRAM",) + _COLUMNS[2:] if pinned else _COLUMNS
    table = [columns] + [
        (r["role"], r["runtime"], *((program_label(r.get("program")),) if pinned else ()),
         r["mode"], r["status"], str(r["pid"] or "-"),
         str(r["port"] or "-"), str(r["restarts"]),
         format_size(r["reserved_bytes"]) if r["reserved_bytes"] else "-", r["detail"])
        for r in _grouped(rows)
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns) - 1)]
    common.print_text("\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1]
        for row in table))


def program_label(program: dict | None) -> str:
    """§14 ``llama-b11434@b11434``; ``-`` for a role on a path (or that runs nothing)."""
    return f"{program['name']}@{program['version']}" if program else "-"


def _grouped(rows: list[dict]) -> list[dict]:
    """§12 one line per instance, grouped under its role: a role of several instances gets a
    line of its own (how many, and in which statuses), its instances indented below it."""
    if not any("/" in r["role"] for r in rows):
        return rows
    groups: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (group_of(r["role"]), replica_of(r["role"]))):
        groups.setdefault(group_of(r["role"]), []).append(r)
    out: list[dict] = []
    for group, mine in groups.items():
        if len(mine) == 1:
            out += mine
            continue
        said: dict[str, int] = {}
        for x in mine:
            said[x["status"]] = said.get(x["status"], 0) + 1
        out.append({"role": group, "runtime": mine[0]["runtime"], "mode": mine[0]["mode"],
                    "program": mine[0].get("program"),
                    "status": f"{len(mine)} instances", "pid": None, "port": None,
                    "restarts": "", "reserved_bytes": 0,
                    "detail": ", ".join(f"{n} {s}" for s, n in sorted(said.items()))})
        out += [{**x, "role": f"  {x['role']}"} for x in mine]
    return out


def _as_recorded(row: dict) -> dict:
    """A row observed against no desired state: what runs, and nothing planned for it."""
    exit_ = row["exit"]["summary"] if row.get("exit") else ""
    detail = "as recorded; nothing is planned while the manifests are invalid"
    return {**row, "next": None, "detail": f"{detail}; {exit_}" if exit_ else detail,
            **({"plan": "(nothing planned: the manifests are invalid)"} if "plan" in row else {})}


def _write_html(path: str, taken) -> int:
    """The page, once, to ``path`` (through a temporary file: a reader never sees half)."""
    # jinja2 is loaded only when a page is written.
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
