"""Demand: what the router has seen asked of each role, as a planner input (PURE; BEHAVIOUR §9).

The router counts, per role, the requests waiting for it to be ready, the
requests it is forwarding now, and when the last one arrived. The daemon
snapshots those counts at the start of every pass into a ``Demand`` value,
which reaches ``plan()`` inside ``Observed`` like any other observation. A
pass outside the daemon (``reconcile plan``, ``--once``, ``status``) has no
router and so no demand at all: ``Observed.demand`` is None, which is not
the same as "no requests" — nothing is started *or* stopped on it.

The rules the planner applies to an on-demand role, here so they are tested
on their own:

* ``wants_start``: requests are waiting for it;
* ``busy``: requests are waiting, queued or in flight, so it is not stopped
  for idleness;
* ``evictable``: running long enough (``min_residency``) and nobody waiting
  for it to be ready (a role just started serves its own queue first); its
  requests in flight are drained by the router before the stop;
* ``idle_left``: seconds until it has had no request for ``idle_after``,
  counted from the latest of its last request, its start and the moment the
  router began counting (a daemon that restarts has forgotten the requests
  before it: it gives every role a fresh ``idle_after``), 0 when idle now;
* ``last_used``: its place in the eviction order, least recently used first.
"""

from __future__ import annotations

import attrs

frozen = attrs.frozen(kw_only=True)


@frozen
class RoleDemand:
    """One role's requests as the router saw them when the pass began."""

    role: str
    waiting: int = 0  # queued until the role is ready
    in_flight: int = 0  # being forwarded now
    queued: int = 0  # ready to go, held back by the role's max_concurrency
    last_request: float | None = None  # wall-clock time the last request arrived

    @property
    def busy(self) -> bool:
        return self.waiting > 0 or self.in_flight > 0 or self.queued > 0

    @property
    def wants_start(self) -> bool:
        return self.waiting > 0


@frozen
class Demand:
    """Every role's demand; a role the router has not seen has none."""

    roles: tuple[RoleDemand, ...] = ()  # by role name
    since: float | None = None  # wall-clock time the router began counting

    def of(self, role: str) -> RoleDemand:
        found = next((d for d in self.roles if d.role == role), None)
        return found if found is not None else RoleDemand(role=role)

    def by_role(self) -> dict[str, RoleDemand]:
        return {d.role: d for d in self.roles}


def last_used(demand: RoleDemand, started_at: float | None, since: float | None = None) -> float:
    """When the role was last used: its last request, its start or ``since``, the latest."""
    return max(t for t in (demand.last_request, started_at, since, 0.0) if t is not None)


def idle_left(demand: RoleDemand, started_at: float | None, idle_after: float,
              now: float, since: float | None = None) -> float | None:
    """Seconds until the role is idle (0: idle now), or None while it is busy."""
    if demand.busy:
        return None
    return max(last_used(demand, started_at, since) + idle_after - now, 0.0)


def resident_left(started_at: float | None, min_residency: float, now: float) -> float:
    """Seconds until a role started at ``started_at`` may be evicted (0: it may now)."""
    if started_at is None:
        return 0.0
    return max(started_at + min_residency - now, 0.0)


def evictable(demand: RoleDemand, started_at: float | None, min_residency: float,
              now: float) -> bool:
    """§9 no request waits for it to be ready, and it has run ``min_residency``."""
    return demand.waiting == 0 and resident_left(started_at, min_residency, now) <= 0


def waiting_text(demand: RoleDemand) -> str:
    """``3 waiting`` (and ``, 1 in flight``) for plan lines."""
    text = f"{demand.waiting} waiting"
    if demand.in_flight:
        text += f", {demand.in_flight} in flight"
    return text
