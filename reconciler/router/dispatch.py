"""Where a forwarded request goes upstream, and what the router does when a server fails it (SHELL).

The router's upstream plumbing, the half of ``Proxy`` (``proxy.py``, its subclass)
that needs no aiohttp: it sees requests as routes, places in the book and the
answers ``proxy.py`` makes, and asks a server only through ``Proxy._get``.

* A role's request (``_forward_role``): forwarded while its route is ready and
  ``max_concurrency`` leaves a place (else it queues for one, the same bound:
  ``max_queue`` waiting → 429); not ready, or closed for a stop, it waits for a
  pass (``_wait``: full → 429, too long → 504, refused meanwhile → 503). A
  connection the server refuses before taking the request (it was just stopped)
  goes back to the queue once; twice → 502.
* §9.1 a group's request (``_forward_group``): the instance ``balancing.choose``
  picks among the ready ones with room (``total_slots`` learned from ``GET
  /props``, ``_learn``), queued while every one is full (the lowest on-demand
  instance asked to start: spillover), sent to another when the one chosen
  refuses the connection.
* §9.1 failover: an instance that fails a request (no connection, 5xx, cut
  mid-answer) is out of rotation at once, the request counted lost when the
  server had taken it (``_failing``), and back when it answers ``/health`` 200
  (``_recover``).
* Readiness: a server a pass just spawned is watched (``watch_role``: ``GET
  /health`` every 4 ms while requests wait) and its waiters go the moment it
  answers; a pass's routes keep what the router knows better (``known_ready``).

Size: one idea, the forwarding of a request once it is read, up to its answer's relay:
the role's and the group's loops, the waits, the stream's upstream side, failover and the
watches share the rotation's state (``_out``, ``_slots``, ``_answered``, the table).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Callable

import attrs

from reconciler.core.desired import RouterConfig
from reconciler.report import logs
from reconciler.router import balancing, clients, rules, upstream
from reconciler.router.queues import CLOSED, FULL, GO, Book, Refusal
from reconciler.router.rules import Route, RouteState, Table
from reconciler.world import probe

_READY_POLL = 0.004  # seconds between readiness looks at a server this pass started
_RECOVER_POLL = 0.05  # seconds between health looks at an instance out of rotation (§9.1) …
_RECOVER_HOLD = 1.0  # … the first one this long after it was taken out (no flapping)

Request = Any  # aiohttp's request, handed on to ``Proxy._send`` (proxy.py owns aiohttp)
Answer = Any  # aiohttp's response, as ``Proxy`` makes it


class Dispatcher:
    """The routes, the rotation of a group's instances and the watches, on the router's loop;
    ``Proxy`` adds the HTTP (``_send``, ``_error``, ``_get``, and ``_session`` once started)."""

    _session: object | None = None

    def __init__(self, config: RouterConfig, book: Book, metrics,
                 on_ready: Callable[[], None] | None, connect_timeout: float) -> None:
        self.config = config
        self.book = book
        self.metrics = metrics
        self.table = Table()
        self._on_ready = on_ready or (lambda: None)
        self._connect_timeout = connect_timeout
        self._watching: set[str] = set()  # roles whose new server is being watched
        self._answered: set[str] = set()  # … and those seen answering since their spawn
        self._raw = Table()  # the last pass's routes, before what the router knows better
        self._out: dict[str, float] = {}  # §9.1 instances out of rotation → when (monotonic)
        self._slots: dict[str, int | None] = {}  # §9.1 learned total_slots (None: asked)
        self._turn = 0  # §9.1 choices made: ties go round a group
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------ what Proxy provides

    async def _send(self, request: Request, route: Route, payload: bytes, arrived: float,
                    streams: bool, client: str, fail=None) -> Answer | None:
        raise NotImplementedError

    def _error(self, status: int, message: str, kind: str, role: str | None = None,
               headers: dict[str, str] | None = None) -> Answer:
        raise NotImplementedError

    async def _get(self, url: str, timeout: float, headers: dict[str, str] | None = None,
                   *, json: bool = False) -> tuple[int, object]:
        raise NotImplementedError

    async def _relay(self, request: Request, role: str, status: int, reason: str | None,
                     fields: list[tuple[str, str]], length: int | None, read,
                     arrived: float, client: str, pipe: upstream.Stream | None = None,
                     fail=None) -> Answer:
        raise NotImplementedError

    # ------------------------------------------------------------ forwarding

    async def _forward_role(self, request: Request, route: Route, payload: bytes,
                            arrived: float, streams: bool, client: str) -> Answer:
        """A request for one role: forwarded when ready and there is a place, else queued."""
        role = route.role
        seq = self.book.arrived(role)
        deadline = arrived + self.config.queue_timeout
        refused_once = queued = False
        while True:
            if route.state is RouteState.READY:
                entry = self.book.enter(role, route.max_concurrency)
                if entry == GO:
                    answer = await self._send(request, route, payload, arrived, streams, client)
                    if answer is not None:
                        return answer
                    if refused_once:
                        return self._error(502, f"{role} refused the connection twice",
                                           "api_error", role)
                    refused_once = True  # stopped a moment ago: wait for the next pass
                elif entry == FULL:
                    if not queued and not rules.admits(self.book.waiting(role),
                                                       self.config.max_queue):
                        return self._full(role)  # a place's queue is bounded too
                    queued = True
                    if not await self.book.queue(role, deadline - time.monotonic()):
                        return self._timeout(role, arrived)
                    route = self.table.get(role) or route
                    continue
                assert entry in (GO, CLOSED)
                route = _waiting(self.table.get(role) or route)
            ready = await self._wait(route, seq, arrived, deadline)
            if not isinstance(ready, Route):
                return ready
            route = ready

    async def _forward_group(self, request: Request, group: str, payload: bytes,
                             arrived: float, streams: bool, client: str) -> Answer:
        """§9.1 a request for a group of instances: balanced, queued while every ready one
        is full, sent elsewhere when the one chosen refuses the connection."""
        seq = self.book.arrived(group)
        deadline = arrived + self.config.queue_timeout
        refusals = 0
        queued = False
        closing: set[str] = set()  # found closed by ``enter`` since the last wait
        while True:
            members = self.table.members(group)
            if not members:
                return self._error(503, f"{group} is no longer a role of this node",
                                   "service_unavailable", group)
            instances = self._instances(members, closing)
            picked = balancing.choose(instances, self._turn)
            if picked is not None:
                self._turn += 1
                route = next(r for r in members if r.role == picked.name)
                if self.book.enter(route.role, None) != GO:
                    closing.add(route.role)  # its gate closed this moment: choose again
                    continue
                answer = await self._send(request, route, payload, arrived, streams, client,
                                          fail=self._failing(route))
                if answer is not None:
                    return answer
                self._take_out(route, "refused the connection")  # nothing was sent
                refusals += 1
                if refusals > 2 * len(members):
                    return self._error(502, f"every instance of {group} refused the "
                                       "connection", "api_error", group)
                continue
            if balancing.full(instances):  # queue for the first place any instance frees
                if not queued and not rules.admits(self.book.waiting(group),
                                                   self.config.max_queue):
                    return self._full(group)
                queued = True
                closing.clear()
                spill = self._spill(members)
                if spill is not None:
                    self.book.want(spill.role, 1)
                try:
                    placed = await self.book.queue(group, deadline - time.monotonic())
                finally:
                    if spill is not None:
                        self.book.want(spill.role, -1)
                if not placed:
                    return self._timeout(group, arrived)
                continue
            if all(r.state is RouteState.REFUSED for r in members) and not members[0].on_demand:
                return self._error(503, "; ".join(r.message for r in members),
                                   "service_unavailable", group)
            closing.clear()
            ready = await self._wait(attrs.evolve(members[0], role=group, state=RouteState.WAIT),
                                     seq, arrived, deadline)
            if not isinstance(ready, Route):
                return ready

    def _instances(self, members: tuple[Route, ...],
                   closing: set[str] = frozenset()) -> list[balancing.Instance]:
        book = self.book
        return [balancing.Instance(
            name=r.role, ready=(r.state is RouteState.READY and book.is_open(r.role)
                                and r.role not in closing),
            in_flight=book.in_flight(r.role), slots=self._slots.get(r.role) or r.slots,
            max_concurrency=r.max_concurrency) for r in members]

    def _spill(self, members: tuple[Route, ...]) -> Route | None:
        """§9.1 spillover: the lowest on-demand instance not running, whose start is asked
        while every ready one is full."""
        return next((r for r in members if r.on_demand and r.state is RouteState.WAIT
                     and r.role not in self._out), None)

    def _full(self, role: str) -> Answer:
        return self._error(429, f"{self.config.max_queue} requests already wait for {role}",
                           "rate_limit_error", role,
                           headers={"Retry-After": str(rules.RETRY_AFTER)})

    def _timeout(self, role: str, arrived: float) -> Answer:
        return self._error(504, f"timed out after {self.config.queue_timeout:g}s waiting for "
                           f"{role}", "timeout", role)

    async def _wait(self, route: Route, seq: int, arrived: float,
                    deadline: float) -> Route | Answer:
        """The route to forward on once ready, or the error answer (refused, full, timed out)."""
        role = route.role
        if route.state is RouteState.REFUSED and not route.on_demand:
            return self._error(503, route.message, "service_unavailable", role)
        if not rules.admits(self.book.waiting(role), self.config.max_queue):
            return self._full(role)
        result = await self.book.wait(role, seq, deadline - time.monotonic())
        if self.metrics is not None:
            self.metrics.queue_wait(role, time.monotonic() - arrived)
        if isinstance(result, Refusal):
            if result.status == 504:
                return self._timeout(role, arrived)
            return self._error(result.status, result.message, "service_unavailable", role)
        return result

    # ------------------------------------------------------------ upstream

    async def _send_stream(self, request: Request, route: Route, payload: bytes,
                           headers: list[tuple[str, str]], arrived: float,
                           client: str, fail=None) -> Answer | None:
        """A streamed answer, on a connection of its own (``upstream.py`` says why):
        llama-server closes its end right after an SSE answer, so nothing is pooled."""
        role = route.role
        headers.append(("Host", route.authority))
        try:
            stream = await upstream.open_stream(route.host, route.port, request.path, headers,
                                                payload, self._connect_timeout)
        except ValueError as exc:  # a header of the client's cannot go on the wire
            return self._error(400, f"a request header cannot be forwarded: {exc}"[:300],
                               "invalid_request_error", role)
        except upstream.Refused:
            return None
        except upstream.Failed as exc:
            if fail is not None:
                fail(f"no connection: {exc}", False)
            return self._error(502, f"{role} failed before answering: {exc}", "api_error",
                               role)
        try:
            try:
                status, fields = await stream.head()
            except upstream.Failed as exc:
                if fail is not None:
                    fail(f"failed before answering: {exc}", True)
                return self._error(502, f"{role} failed before answering: {exc}",
                                   "api_error", role)
            return await self._relay(request, role, status, None, fields, stream.length,
                                     stream.read, arrived, client, pipe=stream, fail=fail)
        finally:
            stream.close()

    def _count(self, role: str, status: int, client: str, head: bytes, tail) -> bool:
        """One answered request in the metrics, with the client's token usage when known
        (a stream's first piece too: Anthropic's ``message_start`` holds its input tokens)."""
        if self.metrics is not None:
            self.metrics.request(role, status)
            seen = b"".join(tail) if tail and tail[0] is head else head + b"".join(tail)
            self.metrics.client(role, client, clients.usage(seen))
        return True

    # ------------------------------------------------------------ failover (§9.1)

    def _failing(self, route: Route) -> Callable[[str, bool], None]:
        """What ``_send`` calls when ``route``'s server failed a request it was sent."""
        def fail(why: str, lost: bool) -> None:
            if lost and self.metrics is not None:
                self.metrics.lost(route.role)
            self._take_out(route, why)
        return fail

    def _take_out(self, route: Route, why: str) -> None:
        """Out of rotation at once; back when it answers ``/health`` 200 again (looked at
        every ``_RECOVER_POLL`` from ``_RECOVER_HOLD`` on: an instance that answers 5xx to
        requests and 200 to ``/health`` comes back once a second, not at every look)."""
        role = route.role
        if role in self._out:
            return
        self._out[role] = time.monotonic()
        self._slots.pop(role, None)  # a server that comes back may have other slots
        self.table = self._overlay(self._raw)
        logs.emit(f"{role}: out of rotation ({why}); back when it answers /health",
                  level=logging.WARNING, event="router", role=role)
        if self.metrics is not None:
            self.metrics.out_of_rotation(role)
        self._spawn(self._recover(role))

    async def _recover(self, role: str) -> None:
        try:
            await asyncio.sleep(_RECOVER_HOLD)
            while role in self._out:
                await asyncio.sleep(_RECOVER_POLL)
                route = self._raw.get(role)
                if (route is None or route.state is RouteState.REFUSED
                        or route.status == "stopped"):
                    break  # gone, refused or stopped by the plan: a pass says when it is back
                status, _ = await self._get(f"http://{route.authority}/health", 1.0)
                if status == 200:
                    if route.state is RouteState.WAIT and route.status == "starting":
                        self._answered.add(role)  # restarted, and answering before the pass
                    break
        finally:
            self._out.pop(role, None)
            self.table = self._overlay(self._raw)
        back = self.table.get(role)
        if back is not None and back.state is RouteState.READY:
            logs.emit(f"{role}: back in rotation (answers /health)", event="router", role=role)
            self.book.ready(back)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _learn(self, table: Table) -> None:
        """§9.1 each ready instance of a group, once: its ``total_slots`` (``GET /props``)."""
        if self._session is None:
            return
        groups = collections.Counter(r.group for r in table.routes)
        for route in table.routes:
            if route.state is not RouteState.READY:
                self._slots.pop(route.role, None)  # (re)started: asked again when ready
            elif (groups[route.group] > 1 and route.slots is None
                    and route.role not in self._slots):
                self._slots[route.role] = None
                self._spawn(self._props(route))

    async def _props(self, route: Route) -> None:
        key = probe.api_key(route.key_file)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        _, props = await self._get(f"http://{route.authority}/props", 2.0, headers, json=True)
        slots = balancing.slots_of(props)
        if route.role in self._slots and slots is not None:
            self._slots[route.role] = slots
            self.book.ready(route)  # more room: queued requests look again

    # ------------------------------------------------------------ readiness

    def known_ready(self, table: Table) -> Table:
        """A pass's routes, with the servers this router saw answer since their spawn still
        ready: the pass that spawned one says ``starting`` (it did not look again); and
        §9.1 the instances out of rotation, waiting (the router knows of their failure first)."""
        self._raw = table
        self._learn(table)
        return self._overlay(table)

    def _overlay(self, table: Table) -> Table:
        routes = []
        for route in table.routes:
            if route.role in self._answered:
                if route.state is RouteState.WAIT and route.status == "starting":
                    route = attrs.evolve(route, state=RouteState.READY, status="running")
                else:
                    self._answered.discard(route.role)  # the passes know better now
            if route.role in self._out and route.state is RouteState.READY:
                route = attrs.evolve(route, state=RouteState.WAIT)
            routes.append(route)
        return Table(routes=tuple(routes))

    def watch_role(self, role: str) -> None:
        """Watch a server just spawned, for its waiters: they go the moment it answers
        ``/health`` 200 (a runtime without one answers 404: left to the next passes)."""
        self._answered.discard(role)  # a new server: not seen answering yet
        route = self.table.get(role)
        if route is None or route.role in self._watching or self._session is None:
            return
        self._watching.add(route.role)
        task = asyncio.get_running_loop().create_task(self._watch(route))
        task.add_done_callback(lambda _: self._watching.discard(route.role))

    async def _watch(self, route: Route) -> None:
        url = f"http://{route.authority}/health"
        deadline = time.monotonic() + self.config.queue_timeout
        while time.monotonic() < deadline:
            now = self.table.get(route.role)
            if now is None or now.state is RouteState.READY or not self.book.waiting(
                    route.role):
                return  # a pass saw it ready, or nobody waits any more
            status, _ = await self._get(url, 1.0)
            if status == 200:
                ready = attrs.evolve(now, state=RouteState.READY, status="running",
                                     message="")
                self.table = attrs.evolve(self.table, routes=tuple(
                    ready if r.role == route.role else r for r in self.table.routes))
                self._answered.add(route.role)
                self.book.ready(ready)
                self._on_ready()  # a pass now: it records the server as running
                return
            if status == 404:
                return
            await asyncio.sleep(_READY_POLL)


def _waiting(route: Route) -> Route:
    """``route`` as if its role were not ready: the request waits for the next pass."""
    return attrs.evolve(route, state=RouteState.WAIT)
