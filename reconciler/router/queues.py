"""The router's book of demand: counts per role, the requests waiting for one, its gate (SHELL).

Two threads meet here. The router's event loop counts: a request arrives
(``arrived``), waits for its role (``wait``), takes a place at the server
(``enter``: refused while the role's route is closed, or while
``max_concurrency`` requests are already there, then it ``queue``s for a
place) … ``finished``. The daemon's thread reads the counts at the start of
each pass (``snapshot``, under a lock) as a ``demand.Demand`` value, and after
the pass the router hands the new routes to ``publish`` on its own loop:

* a role that is ``READY`` now releases all its waiters at once;
* a role ``REFUSED`` fails its waiters with the plan's message (503). For an
  on-demand role only the waiters that pass had counted are failed: one that
  arrived after the snapshot is demand the next pass has not weighed yet;
* a role that still starts, loads, backs off or waits for room keeps its
  waiters, each up to ``queue_timeout`` (then 504).

**The gate** (§9: a stop never cuts a request). Before the daemon stops a
role it ``close``s the role's route — from then on no request enters; the
ones that try wait for its next start — and ``drain``s it: it waits, on the
daemon's thread, until the requests in flight at the server are done (or the
drain timeout), the count read under the lock at that moment. A close is
lifted by the routes of the pass that closed it (or a later one), never by an
older pass's routes that reach the loop late.

**Groups** (§9.1: a role with replicas): each instance is counted under its
own name (``chat``, ``chat/1``: its own in flight, demand and gate). A request
for the group waits, and queues for a place, under the group's name (that of
instance 0, so a group nobody runs asks for instance 0); it is released when
*any* instance of the group is ready, or frees a place, and refused only when
every instance is. ``want`` counts demand for one more instance (spillover)
while a request of the group queues.

Every new waiter calls ``wake`` (the daemon's wake-up pipe): demand is news
for the planner; so does the end of a role's last request or of its queue
while another role's requests wait (a holder that may now make room).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import attrs

from reconciler.core.demand import Demand, RoleDemand
from reconciler.router.rules import Route, RouteState, Table

GO, CLOSED, FULL = "go", "closed", "full"


@attrs.frozen(kw_only=True)
class Refusal:
    """Why a waiting request is not forwarded: an HTTP status and a message."""

    status: int  # 503 refused, 504 timed out
    message: str


class _Waiter:
    __slots__ = ("future", "seq")

    def __init__(self, future: asyncio.Future, seq: int) -> None:
        self.future = future
        self.seq = seq  # the request's number: was it counted by a pass's snapshot?


class _Counts:
    __slots__ = ("waiting", "in_flight", "last_request", "waiters", "places", "closed")

    def __init__(self) -> None:
        self.waiting = 0
        self.in_flight = 0
        self.last_request: float | None = None
        self.waiters: list[_Waiter] = []
        self.places: list[asyncio.Future] = []  # queued for a place under max_concurrency
        self.closed: int | None = None  # the pass that closed the route (None: open)


class Book:
    """Per-role demand, waiters and gate (see the module docstring for which thread does what)."""

    def __init__(self, wake: Callable[[], None], clock: Callable[[], float] = time.time) -> None:
        self._wake = wake
        self._clock = clock
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._roles: dict[str, _Counts] = {}
        self._seq = 0  # requests counted so far
        self._groups: dict[str, str] = {}  # §9.1 instance → its group, groups of 2 or more
        self.since = clock()  # demand before this moment is unknown (§9: a fresh idle_after)
        self.loop: asyncio.AbstractEventLoop | None = None  # the router's, for the gate's kicks

    # ------------------------------------------------------------ the daemon's thread

    def snapshot(self) -> tuple[Demand, int]:
        """The demand now, and the number of the last request it counts."""
        with self._lock:
            roles = tuple(RoleDemand(role=name, waiting=c.waiting, in_flight=c.in_flight,
                                     queued=len(c.places), last_request=c.last_request)
                          for name, c in sorted(self._roles.items()))
            return Demand(roles=roles, since=self.since), self._seq

    def close(self, role: str, token: int) -> None:
        """No request for ``role`` enters from now on (those queued for a place wait again)."""
        with self._lock:
            self._roles.setdefault(role, _Counts()).closed = token
        self._kick(role)

    def reopen(self, role: str) -> None:
        with self._lock:
            counts = self._roles.setdefault(role, _Counts())
            counts.closed = None
        self._kick(role)

    def drain(self, role: str, timeout: float) -> int:
        """Wait until nothing of ``role`` is in flight, at most ``timeout``; what still is."""
        with self._drained:
            counts = self._roles.setdefault(role, _Counts())
            self._drained.wait_for(lambda: counts.in_flight == 0, timeout)
            return counts.in_flight

    def _kick(self, role: str) -> None:
        """Wake the requests queued for a place: they look at the route again."""
        if self.loop is not None and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._release_places, role, None)
            except RuntimeError:
                pass  # the router's loop closed meanwhile: nobody is queued any more

    # ------------------------------------------------------------ the router's loop

    def arrived(self, role: str) -> int:
        """Count a request for ``role``; its number."""
        with self._lock:
            self._seq += 1
            counts = self._roles.setdefault(role, _Counts())
            counts.last_request = self._clock()
            return self._seq

    def waiting(self, role: str) -> int:
        counts = self._roles.get(role)
        return counts.waiting + len(counts.places) if counts is not None else 0

    async def wait(self, role: str, seq: int, timeout: float) -> Route | Refusal:
        """Queue until a pass says ``role`` is ready (its Route), refuses it, or time is up."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        waiter = _Waiter(future, seq)
        with self._lock:
            counts = self._roles.setdefault(role, _Counts())
            counts.waiting += 1
            counts.waiters.append(waiter)
        self._wake()
        try:
            return await asyncio.wait_for(future, max(timeout, 0.0))
        except TimeoutError:
            return Refusal(status=504, message=f"timed out waiting for {role} to be ready")
        finally:
            with self._lock:
                counts.waiting -= 1
                if waiter in counts.waiters:
                    counts.waiters.remove(waiter)
                others = counts.waiting == 0 and self._others_wait(role)
            if others:
                self._wake()  # its queue is served: it may make room for another now

    def enter(self, role: str, limit: int | None) -> str:
        """A place at the server: ``GO`` (counted in flight), ``CLOSED`` or ``FULL``."""
        with self._lock:
            counts = self._roles.setdefault(role, _Counts())
            if counts.closed is not None:
                return CLOSED
            if limit is not None and counts.in_flight >= limit:
                return FULL
            counts.in_flight += 1
            return GO

    async def queue(self, role: str, timeout: float) -> bool:
        """Wait for a place to free (or the route to change); False when time is up."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        with self._lock:
            counts = self._roles.setdefault(role, _Counts())
            counts.places.append(future)
        try:
            await asyncio.wait_for(future, max(timeout, 0.0))
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if future in counts.places:
                    counts.places.remove(future)

    def finished(self, role: str) -> None:
        """A forwarded request ended: the role was in use until now (idle_after counts from here)."""
        with self._drained:
            counts = self._roles[role]
            counts.in_flight -= 1
            counts.last_request = self._clock()
            self._drained.notify_all()
            others = counts.in_flight == 0 and self._others_wait(role)
        group = self._groups.get(role)
        if group is None:
            self._release_places(role, 1)
        else:  # §9.1 the group's queue re-chooses: any of it may take this place
            self._release_places(role, None)
            if group != role:
                self._release_places(group, None)
        if others:
            self._wake()

    def _others_wait(self, role: str) -> bool:
        return any(c.waiting for name, c in self._roles.items() if name != role)

    def _release_places(self, role: str, count: int | None) -> None:
        counts = self._roles.get(role)
        if counts is None:
            return
        for future in list(counts.places)[:count]:
            if not future.done():
                future.set_result(None)

    def publish(self, table: Table, seq: int, token: int = 0) -> None:
        """A pass's routes (its demand counted requests up to ``seq``; ``token``: the pass):
        lift the closes it covers, then release or fail waiters."""
        with self._lock:
            for counts in self._roles.values():
                if counts.closed is not None and counts.closed <= token:
                    counts.closed = None
        members: dict[str, list[Route]] = {}
        for r in table.routes:
            members.setdefault(r.group, []).append(r)
        self._groups = {r.role: r.group for group in members.values() if len(group) > 1
                        for r in group}
        for name, counts in self._roles.items():
            self._release_places(name, None)
            if not counts.waiters:
                continue
            route = table.get(name)
            group = members.get(name, ())
            if len(group) > 1:  # §9.1 the group's waiters: any ready instance serves them
                self._publish_group(counts, group, seq)
            elif route is None:
                self._settle(counts, lambda w: True, Refusal(
                    status=503, message=f"{name} is no longer a role of this node"))
            elif route.state is RouteState.READY and counts.closed is None:
                self._settle(counts, lambda w: True, route)
            elif route.state is RouteState.REFUSED:
                weighed = (lambda w: w.seq <= seq) if route.on_demand else (lambda w: True)
                self._settle(counts, weighed, Refusal(status=503, message=route.message))

    def _publish_group(self, counts: _Counts, group: list[Route], seq: int) -> None:
        """A group's waiters go when an open instance is ready; 503 when every one refuses."""
        ready = next((r for r in group if r.state is RouteState.READY and self.is_open(r.role)),
                     None)
        if ready is not None:
            self._settle(counts, lambda w: True, ready)
        elif all(r.state is RouteState.REFUSED for r in group):
            weighed = (lambda w: w.seq <= seq) if group[0].on_demand else (lambda w: True)
            self._settle(counts, weighed, Refusal(status=503, message="; ".join(
                r.message for r in group)))

    def is_open(self, role: str) -> bool:
        """Its gate is open: no stop is closing it (§9)."""
        counts = self._roles.get(role)
        return counts is None or counts.closed is None

    def ready(self, route: Route) -> None:
        """``route``'s server answers now (the router saw it): its waiters go at once, and
        those of its group (§9.1)."""
        for name in dict.fromkeys((route.role, self._groups.get(route.role, route.role))):
            counts = self._roles.get(name)
            if counts is not None and self.is_open(route.role):
                self._settle(counts, lambda w: True, route)
                self._release_places(name, None)

    def in_flight(self, role: str) -> int:
        counts = self._roles.get(role)
        return counts.in_flight if counts is not None else 0

    def want(self, role: str, count: int) -> None:
        """§9.1 spillover: ``count`` more (or fewer) requests want ``role`` started, though
        none waits for it alone (they queue for the group's first free place)."""
        with self._lock:
            self._roles.setdefault(role, _Counts()).waiting += count
        if count > 0:
            self._wake()

    def fail_all(self, message: str) -> None:
        """The router is closing: every waiter gets 503."""
        for counts in self._roles.values():
            self._settle(counts, lambda w: True, Refusal(status=503, message=message))

    @staticmethod
    def _settle(counts: _Counts, which: Callable[[_Waiter], bool], result) -> None:
        for waiter in list(counts.waiters):
            if which(waiter) and not waiter.future.done():
                waiter.future.set_result(result)
