"""The router beside the watch daemon: its own thread and asyncio loop, and the hand-offs (SHELL).

The daemon is a ``selectors`` loop on the main thread; the router is an
asyncio server. Each keeps its own loop, and they meet in three places, each
safe across threads:

* demand → daemon: a request that has to wait calls ``wake`` (the daemon's
  ``request_pass``: one byte on its control pipe), so a pass runs at once;
* daemon → demand: at the start of each pass the daemon takes
  ``demand()``, a consistent snapshot of the book (under its lock);
* daemon → router: after each pass, ``publish(result, seq)`` computes the
  routes from the pass's plan and outcomes (pure, on the daemon's thread)
  and hands them to the router's loop with ``loop.call_soon_threadsafe``;
  waiters for a role that is ready now are forwarded there and then;
* the pass → router, right after a spawn: ``spawned(decision)`` (the
  executor's hook): the router watches the new server itself
  (``Proxy.watch_role``) and its waiters go the moment it answers ``/health``
  200, not when the pass (which goes on acting and recording) is over;
* the pass → router, while acting: ``before_stop(decision)`` (the executor's
  hook, on the daemon's thread) closes the role's route and drains its
  requests in flight before any stop (§9: a stop never cuts a request).
  An idle stop is called off if anything is in flight at that moment; any
  other stop (an eviction, a removal) waits up to ``drain_timeout``, then
  goes ahead and counts the requests it cuts.

``start()`` returns once the server listens (or raises the bind error);
``close()`` fails the waiters with 503, stops the server and joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

from reconciler.core.decisions import Reason, Verb
from reconciler.core.demand import Demand
from reconciler.core.desired import RouterConfig
from reconciler.router import clients, rules
from reconciler.router.proxy import Proxy
from reconciler.router.queues import Book
from reconciler.report import logs


class Router:
    """One router: ``start``, then ``demand``/``publish`` from the daemon, then ``close``."""

    def __init__(self, config: RouterConfig, *, wake: Callable[[], None], metrics=None,
                 connect_timeout: float = 2.0, status=None) -> None:
        self.config = config
        self.metrics = metrics
        self.book = Book(wake)
        self.address: tuple[str, int] | None = None
        self._api_key = _read_key(config.api_key_file)
        keys = _read_keys(config.api_keys_file) if config.api_keys_file else None
        self._proxy = Proxy(config, self.book, metrics=metrics, api_key=self._api_key,
                            keys=keys, connect_timeout=connect_timeout, on_ready=wake)
        self._pass = 0  # the pass in progress: a close it makes is lifted by its own routes
        self._proxy.status = status  # §11 the status page on GET /
        self._loop = asyncio.new_event_loop()
        self.book.loop = self._loop
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reconciler-router", daemon=True)
        if metrics is not None:
            metrics.snapshot = lambda: self.book.snapshot()[0]

    # ------------------------------------------------------------ the daemon's side

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def demand(self) -> tuple[Demand, int]:
        """The start of a pass: its demand (and the pass's number, for the gate)."""
        self._pass += 1
        return self.book.snapshot()

    def before_stop(self, decision) -> str | None:
        """§9 the gate before a stop: close the route, drain; why the stop must not happen."""
        role = decision.role
        if self._proxy.table.get(role) is None:
            return None  # not a role the router forwards to
        self.book.close(role, self._pass)
        idle = decision.reason is Reason.IDLE
        left = self.book.drain(role, 0.0 if idle else self.config.drain_timeout)
        if not left:
            return None
        if idle:
            self.book.reopen(role)
            return f"{left} request(s) in flight; not idle, not stopped"
        logs.emit(f"{role}: {left} request(s) still in flight after drain_timeout "
                  f"{self.config.drain_timeout:g}s; stopping it cuts them",
                  level=logging.WARNING, event="router", role=role)
        if self.metrics is not None:
            self.metrics.cut(role, left)
        return None

    def spawned(self, decision) -> None:
        """§9 a server was just spawned (the pass goes on): its waiters go when it answers.
        Never fails the pass: a router that is closing watches nothing."""
        try:
            self._loop.call_soon_threadsafe(self._proxy.watch_role, decision.role)
        except RuntimeError:
            pass

    def publish(self, result, seq: int) -> None:
        """A pass's plan and outcomes as routes, to the router's loop (waiters go now)."""
        if result is None or result.plan is None or result.desired is None:
            return
        table = rules.routes(result.plan, result.desired, result.outcomes)
        self._loop.call_soon_threadsafe(self._apply, table, seq, self._pass)
        if self.metrics is not None:
            self.metrics.node = result.desired.node.name or self.metrics.node
            self._count(result)

    def close(self) -> None:
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=10)

    # ------------------------------------------------------------ the router's loop

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        try:
            self.address = await self._proxy.start()
        except BaseException as exc:  # the bind failed: start() raises it
            self._error = exc
            await self._proxy.close()
            self._ready.set()
            return
        self._ready.set()
        await self._stopping.wait()
        self.book.fail_all("the router is shutting down")
        await self._proxy.close()

    def _apply(self, table: rules.Table, seq: int, token: int) -> None:
        self._proxy.table = self._proxy.known_ready(table)
        self.book.publish(self._proxy.table, seq, token)

    def _count(self, result) -> None:
        """Cold starts and evictions that this pass carried out."""
        done = {o.role for o in result.outcomes if o.ok}
        for d in result.plan.decisions:
            if d.role not in done:
                continue
            if d.verb is Verb.START and d.reason is Reason.DEMAND:
                self.metrics.cold_start(d.role)
            elif d.verb is Verb.STOP and d.reason is Reason.EVICTED:
                self.metrics.eviction(d.role)


def _read_key(path: str | None) -> str | None:
    """The bearer key: the file's content without surrounding whitespace (OSError if unreadable)."""
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        key = f.read().strip()
    if not key:
        raise ValueError(f"api_key_file {path} is empty")
    return key


def _read_keys(path: str) -> dict[str, str]:
    """``api_keys_file``: digest → client name (OSError if unreadable, ValueError if bad)."""
    with open(path, encoding="utf-8") as f:
        return clients.parse_keys(f.read(), path)
