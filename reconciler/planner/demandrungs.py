"""The on-demand rungs: roles started when a request asks for them (PURE; §9).

``on_demand`` is the ladder's rung for such a role: nobody asks, it stays
stopped; no request for ``idle_after``, it is stopped. ``demand_hint`` then
names the demand in the decision's reason and sets when the daemon looks
again (soon while requests wait, at the end of ``idle_after`` otherwise), and
``evictable`` says whether the role may be stopped, least recently used
first, for a claim the ledger refused (``eviction``): not while requests
wait for it to be ready, not before ``min_residency`` (no thrashing); a
role that holds memory but may not go yet makes a contended claim wait
(``evictable_in``: when to look again). Demand is seen only by
the daemon (``Observed.demand``): without it nothing is started or stopped.
"""

from __future__ import annotations

import attrs

from reconciler.core import demand as demands
from reconciler.core.decisions import Reason, Status, Verb
from reconciler.core.demand import Demand
from reconciler.planner.ledger import Draft
from reconciler.planner.rungs import Role, draft, started
from reconciler.core.units import format_duration


def on_demand(r: Role, demand: Demand | None, now: float) -> Draft | None:
    """§9 the on-demand rung: a Draft when it decides, None to go on down the ladder.

    Without demand (outside the daemon) nothing is started or stopped for it:
    a running one is kept as any role, a stopped one stays stopped.
    """
    spec = r.spec
    assert spec is not None
    seen = demand.of(r.name) if demand is not None else None
    if r.running:
        left = (demands.idle_left(seen, started(r), spec.idle_after, now, demand.since)
                if seen is not None and demand is not None else None)
        if left is not None and left <= 0:
            return draft(r, Verb.STOP, Reason.IDLE, Status.RUNNING,
                         f"on-demand; no request for {format_duration(spec.idle_after)}",
                         why=format_duration(spec.idle_after), release=r.reserved)
        return None
    if seen is not None and seen.wants_start:
        return None  # started (or restarted after its backoff) below, under the ledger
    crashed = r.record is not None and (r.record.pid is not None
                                        or r.record.exited_at is not None)
    if demand is None:
        detail = "on-demand; not running (demand is seen only by `reconcile watch`)"
    else:
        detail = "on-demand; not running, no request waiting"
    # A dead on-demand server nobody asks for holds no memory; its record keeps
    # the crash (and the count) for the backoff of the next request's start.
    return draft(r, Verb.KEEP, Reason.ON_DEMAND, Status.EXITED if crashed else Status.STOPPED,
                 detail, why="no demand known outside the daemon" if demand is None
                 else "no request waiting", release=r.reserved)


#: §9 while requests wait for a starting role, the daemon looks again this soon
#: (a pass per 25 ms, only while a started role with waiters is not ready).
WAITER_POLL = 0.025


def demand_hint(r: Role, drafted: Draft, demand: Demand, now: float) -> Draft:
    """§9 an on-demand role's reason and requeue: its demand, when it goes idle."""
    d, seen = drafted.decision, demand.of(r.name)
    changes: dict = {}
    if d.verb is Verb.START and d.reason is Reason.MISSING and seen.wants_start:
        changes.update(reason=Reason.DEMAND, why=demands.waiting_text(seen))
    if seen.waiting and (d.verb in (Verb.START, Verb.RESTART)
                         or d.status in (Status.STARTING, Status.LOADING)):
        changes["retry_in"] = WAITER_POLL
    elif d.verb is Verb.KEEP and r.running and r.spec is not None:
        left = demands.idle_left(seen, started(r), r.spec.idle_after, now, demand.since)
        if left is None:  # busy now: its requests end unannounced, so look again idle_after on
            left = r.spec.idle_after
        if d.retry_in is None or left < d.retry_in:
            changes["retry_in"] = left
    if not changes:
        return drafted
    return attrs.evolve(drafted, decision=attrs.evolve(d, **changes))


def holds(r: Role, drafted: Draft) -> bool:
    """§9 running, kept, holding memory: an on-demand role that eviction could stop."""
    return r.running and drafted.decision.verb is Verb.KEEP and drafted.holds is not None


def evictable(r: Role, drafted: Draft, demand: Demand, now: float,
              min_residency: float = 0.0) -> bool:
    """§9 holding memory, nobody waiting for it, run ``min_residency``; requests in flight
    are no bar: the router closes the role's route and drains them before the stop."""
    return holds(r, drafted) and demands.evictable(demand.of(r.name), started(r),
                                                   min_residency, now)


def evictable_in(r: Role, demand: Demand, now: float, min_residency: float) -> float:
    """Seconds until a holding role that is not evictable now may be (WAITER_POLL while
    its own waiters keep it: they are released the moment it is ready)."""
    left = demands.resident_left(started(r), min_residency, now)
    return max(left, WAITER_POLL) if demand.of(r.name).waiting == 0 else max(left, 1.0)
