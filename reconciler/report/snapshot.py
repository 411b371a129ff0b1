"""What the status page shows, taken from a pass and the store (SHELL; BEHAVIOUR §11).

The page is rendered from the very values the CLI prints: ``status_rows`` is
``reconcile status --json``'s ``roles`` (plus the plan's line, the demand and
the commit that started the role), the memory bars are ``plan --json``'s
``ledger`` (``planner/memoryview.py``), the events are ``events --json``'s
lines. ``take`` reads the store once and returns a frozen ``Snapshot``; the
rendering (``page.py``) does no IO.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from reconciler.core.instances import group_of, replica_of
from reconciler.planner import memoryview
from reconciler.planner.memoryview import MemoryBar

#: Events the page lists (the newest).
EVENTS_SHOWN = 100
_STARTS = ("start", "restart", "load")


@attrs.frozen(kw_only=True)
class Snapshot:
    """One pass as the page shows it; every field is plain data."""

    node: str = ""
    git_commit: str | None = None
    taken_at: float = 0.0  # wall-clock time of the pass
    problems: tuple[str, ...] = ()  # manifest problems: the rows are the last recorded state
    rows: tuple[dict[str, Any], ...] = ()
    bars: tuple[MemoryBar, ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    fetches: tuple[dict[str, Any], ...] = ()  # §1.6 Models on their way: model, state, bytes
    rollout: tuple[str, ...] = ()  # §13 the node's place in each rollout (`status`'s lines)
    version: int = 0  # bumped by each publish (the page's live updates compare it)


def status_rows(result, store, *, records=None) -> list[dict]:
    """``reconcile status --json``'s rows: one per decision of ``result.plan``."""
    records = {r.name: r for r in (store.roles() if records is None else records)}
    rows = []
    for d in result.plan.decisions:
        spec = result.desired.role(d.role) if result.desired else None
        record = records.get(d.role)
        obs = result.observed.role(d.role)
        pid = obs.process.pid if obs.process and obs.process.owned else None
        rows.append({
            "role": d.role,
            "group": group_of(d.role),  # §12 the role an instance is of (its own name)
            "instance": replica_of(d.role),  # §12 its index (0 for a role without replicas)
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
            "exit": exit_json(record.exit if record and record.exit else obs.exit),
            "devices": [{"device": dev, "reserved_bytes": size} for dev, size in d.devices],
            "program": _program(result.desired, spec),
        })
    return rows


def _program(desired, spec) -> dict | None:
    """§14 the Program a managed role runs: name, version, the sha256 of its file list."""
    pinned = desired.program_for(spec) if spec is not None and spec.managed else None
    return None if pinned is None else {"name": pinned.name, "version": pinned.version,
                                        "sha256": pinned.digest}


def exit_json(info) -> dict | None:
    """How the role's last server ended (§4), with its log's last lines; None: it did not."""
    if info is None:
        return None
    from reconciler.planner import exitreasons

    return {"summary": exitreasons.summary(info), "known": info.known, "code": info.code,
            "signal": exitreasons.signal_name(info.signal) if info.signal is not None else None,
            "oom": info.oom or None, "log": list(info.log)}


def event_json(e) -> dict[str, Any]:
    """One event as ``reconcile events --json`` prints it."""
    return {"id": e.id, "at": e.at, "role": e.role, "verb": e.kind, "reason": e.reason,
            "detail": e.detail, "ok": e.ok, "git_commit": e.git_commit}


def take(result, store, *, problems=(), applied: bool, version: int = 0,
         wall=time.time) -> Snapshot:
    """The page's values for ``result`` (a pass with a plan) and the store now.

    ``problems``: the manifests' own (the result then is the last good or the
    recorded state). ``applied``: the pass acted (the store's reservations are
    the ledger after it) rather than only planned.
    """
    from reconciler.planner import render
    from reconciler.world import procs

    records = store.roles()
    rows = status_rows(result, store, records=records)
    started_by = store.started_by(_STARTS)
    demand = result.observed.demand if result.observed is not None else None
    decisions = {d.role: d for d in result.plan.decisions}
    observed = {}
    for row in rows:
        d = decisions[row["role"]]
        row["plan"] = render.line(d)
        row["git_commit"] = started_by.get(row["role"])
        row["on_demand"] = bool(result.desired and (s := result.desired.role(d.role))
                                and s.on_demand)
        row["demand"] = None
        if row["on_demand"] and demand is not None:
            rd = demand.of(d.role)
            row["demand"] = {"waiting": rd.waiting, "in_flight": rd.in_flight,
                             "last_request": rd.last_request}
        if row["pid"] is not None:
            rss = procs.rss(row["pid"])
            if rss is not None:
                observed[row["role"]] = rss
    reserved = {r.name: r.reserved for r in records}
    bar = memoryview.host_ram(result.plan, reserved, result.desired, applied=applied,
                              observed=observed)
    last = store.last_event_id()
    events = store.events(after_id=max(last - EVENTS_SHOWN, 0))[-EVENTS_SHOWN:]
    return Snapshot(
        node=(result.desired.node.name if result.desired is not None else "") or result.node,
        git_commit=result.git_commit, taken_at=result.started or wall(),
        problems=tuple(str(p) for p in problems), rows=tuple(rows),
        bars=(bar, *memoryview.device_bars(result.plan, result.desired)),
        events=tuple(event_json(e) for e in reversed(events)),
        fetches=fetch_rows(result.observed), version=version,
        rollout=tuple(getattr(result, "rollout", ())))


def fetch_rows(observed) -> tuple[dict[str, Any], ...]:
    """Each Model this node fetches and is not done with: how far it is (§1.6)."""
    out = []
    for f in observed.fetches if observed is not None else ():
        if str(f.state) == "done":
            continue
        out.append({"model": f.model, "state": str(f.state), "total": f.total,
                    "done": f.total - f.missing, "rate": f.rate, "detail": f.detail})
    return tuple(out)


def log_dirs(result, store, state_dir: str) -> dict[str, str]:
    """Each managed role's instance directory (where its ``server.log`` is), as ``logs`` finds it."""
    from reconciler.core.desired import Mode
    from reconciler.planner import identity
    from reconciler.world import instances

    desired = result.desired
    root = (instances.data_root(desired, state_dir) if desired is not None
            else f"{state_dir}/instances")
    out = {}
    records = {r.name: r for r in store.roles()}
    for d in (result.plan.decisions if result.plan is not None else ()):
        spec = desired.role(d.role) if desired is not None else None
        record = records.get(d.role)
        if (spec.mode if spec is not None else record.mode if record else None) is not Mode.MANAGED:
            continue
        iid = record.instance_id if record is not None else identity.instance_id(spec)
        out[d.role] = instances.instance_dir(root, iid)
    return out
