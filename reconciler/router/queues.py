"""The router's book of demand: counts per role, and the requests waiting for one (SHELL).

Two threads meet here. The router's event loop counts: a request arrives
(``arrived``), waits for its role (``wait``), is forwarded (``forwarding``
… ``finished``). The daemon's thread reads the counts at the start of each
pass (``snapshot``, under a lock) as a ``demand.Demand`` value, and after
the pass the router hands the new routes to ``publish`` on its own loop:

* a role that is ``READY`` now releases all its waiters at once, the moment
  the pass saw it ready (readiness is pushed, never polled);
* a role ``REFUSED`` fails its waiters with the plan's message (503). For an
  on-demand role only the waiters that pass had counted are failed: one that
  arrived after the snapshot is demand the next pass has not weighed yet;
* a role that still starts, loads or backs off keeps its waiters, each up
  to ``queue_timeout`` (then 504).

Every new waiter calls ``wake`` (the daemon's wake-up pipe): demand is news
for the planner. The counts are changed only on the router's loop; the lock
makes each snapshot consistent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import attrs

from reconciler.core.demand import Demand, RoleDemand
from reconciler.router.rules import Route, RouteState, Table


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
    __slots__ = ("waiting", "in_flight", "last_request", "waiters")

    def __init__(self) -> None:
        self.waiting = 0
        self.in_flight = 0
        self.last_request: float | None = None
        self.waiters: list[_Waiter] = []


class Book:
    """Per-role demand and waiters (see the module docstring for which thread does what)."""

    def __init__(self, wake: Callable[[], None], clock: Callable[[], float] = time.time) -> None:
        self._wake = wake
        self._clock = clock
        self._lock = threading.Lock()
        self._roles: dict[str, _Counts] = {}
        self._seq = 0  # requests counted so far
        self.since = clock()  # demand before this moment is unknown (§9: a fresh idle_after)

    # ------------------------------------------------------------ the daemon's thread

    def snapshot(self) -> tuple[Demand, int]:
        """The demand now, and the number of the last request it counts."""
        with self._lock:
            roles = tuple(RoleDemand(role=name, waiting=c.waiting, in_flight=c.in_flight,
                                     last_request=c.last_request)
                          for name, c in sorted(self._roles.items()))
            return Demand(roles=roles, since=self.since), self._seq

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
        return counts.waiting if counts is not None else 0

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
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return Refusal(status=504, message=(
                f"timed out after {timeout:g}s waiting for {role} to be ready"))
        finally:
            with self._lock:
                counts.waiting -= 1
                if waiter in counts.waiters:
                    counts.waiters.remove(waiter)

    def forwarding(self, role: str) -> None:
        with self._lock:
            self._roles.setdefault(role, _Counts()).in_flight += 1

    def finished(self, role: str) -> None:
        """A forwarded request ended: the role was in use until now (idle_after counts from here)."""
        with self._lock:
            counts = self._roles[role]
            counts.in_flight -= 1
            counts.last_request = self._clock()

    def publish(self, table: Table, seq: int) -> None:
        """A pass's routes (its demand counted requests up to ``seq``): release or fail waiters."""
        for name, counts in self._roles.items():
            if not counts.waiters:
                continue
            route = table.get(name)
            if route is None:
                self._settle(counts, lambda w: True, Refusal(
                    status=503, message=f"{name} is no longer a role of this node"))
            elif route.state is RouteState.READY:
                self._settle(counts, lambda w: True, route)
            elif route.state is RouteState.REFUSED:
                weighed = (lambda w: w.seq <= seq) if route.on_demand else (lambda w: True)
                self._settle(counts, weighed, Refusal(status=503, message=route.message))

    def fail_all(self, message: str) -> None:
        """The router is closing: every waiter gets 503."""
        for counts in self._roles.values():
            self._settle(counts, lambda w: True, Refusal(status=503, message=message))

    @staticmethod
    def _settle(counts: _Counts, which: Callable[[_Waiter], bool], result) -> None:
        for waiter in list(counts.waiters):
            if which(waiter) and not waiter.future.done():
                waiter.future.set_result(result)
