"""No client can starve the daemon: connection caps and quiet logs for client mistakes (SHELL; §9).

The router and the metrics endpoint share a process with the daemon, whose
passes, probes and servers need file descriptors. So:

* ``connection_cap``: the most client connections at once, below the
  process's descriptor budget. The soft ``RLIMIT_NOFILE`` is first raised to
  the hard one (at most ``FD_CEILING``); then the cap is ``max_connections``,
  and never more than ``(limit − FD_RESERVE) / 2`` (a forwarded request holds
  two descriptors: the client's and the server's). A connection beyond the
  cap is answered 503 (OpenAI-shaped) and closed at once;
* ``Hush`` (``report/logs.py``): client mistakes (bad HTTP, timeouts, a refused connection) are
  logged one line per kind per ``interval``, with the count of those left
  unsaid, and never with a traceback; only the router's own bugs (a 500)
  carry one, rate-limited the same way;
* ``GuardedConnection``: the mix-in the proxy adds to aiohttp's connection
  protocol (it imports no aiohttp itself): the cap, and the quiet log;
* ``release``: a closed connection's transport is freed at once. CPython
  3.11's socket transport holds a bound method of itself (``_read_ready_cb``;
  3.12 drops it only in ``close()``, not when the peer goes), a reference
  cycle: each closed connection then waited for a full garbage collection,
  which in a daemon with a large long-lived heap comes seldom, and a storm of
  idle connections piled up (on loopback, 5 storms of 4,000 idle connections
  against the cap: +50,000 objects, RSS 38 → 49 MB; with ``release`` +1,500
  objects, 38 → 44 MB, the same after one storm as after five; the whole
  ``reconcile watch`` daemon, 6 storms of 3,500: 51 → 64 MB before, 51 → 58
  after, flat from the first storm on). aiohttp keeps
  a handler it never counted (refused over the cap) through its parser: that
  link is cut too. What stays is the allocator's high-water mark of the
  cap's connections at once (pymalloc keeps a 1 MiB arena while any object
  in it lives; ``malloc_trim`` gives back under 1 MB of it, so it is not used).
"""

from __future__ import annotations

import resource

from reconciler.report.logs import Hush
from reconciler.router import apis

__all__ = ["Hush", "GuardedConnection", "Gauge", "connection_cap", "raw_error", "release"]

#: Descriptors kept for the daemon itself (passes, probes, pidfds, server logs).
FD_RESERVE = 256
#: The soft descriptor limit is raised to the hard one, but no further than this.
FD_CEILING = 65536


def connection_cap(max_connections: int) -> int:
    """Raise the soft descriptor limit to the hard one; the connection cap under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_CEILING if hard == resource.RLIM_INFINITY else min(hard, FD_CEILING)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):
            pass
    budget = FD_CEILING if soft == resource.RLIM_INFINITY else soft
    return max(1, min(max_connections, (budget - FD_RESERVE) // 2))


def raw_error(status: int, reason: str, message: str, kind: str) -> bytes:
    """A whole HTTP/1.1 error answer, OpenAI-shaped, for a connection that gets nothing else."""
    body = apis.error_body(message, kind, status)
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("ascii") + body


def release(transport) -> None:
    """Break a closed transport's cycle through itself, so it is freed by its reference
    count, not at the next full collection (see the module; a no-op where there is none)."""
    if getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # noqa: SLF001  (CPython's own 3.12 close() does this)


class Gauge:
    """Connections open now, against the cap (one per listener)."""

    def __init__(self, cap: int, hush: Hush, what: str = "router") -> None:
        self.cap = cap
        self.open = 0
        self.refused = 0
        self.hush = hush
        self.what = what


class GuardedConnection:
    """Mix-in for aiohttp's ``RequestHandler``: the cap and the quiet log (see the module)."""

    gauge: Gauge  # set on the subclass the proxy makes

    def connection_made(self, transport) -> None:
        self._transport_held = transport  # released when the connection is lost
        gauge = self.gauge
        if gauge.open >= gauge.cap:
            gauge.refused += 1
            gauge.hush.say("connections", f"{gauge.what}: {gauge.cap} connections already "
                           "open; refusing more (max_connections)")
            try:
                transport.write(raw_error(503, "Service Unavailable",
                                          f"too many connections (max {gauge.cap})",
                                          "service_unavailable"))
            finally:
                transport.close()
            self._manager = None  # type: ignore[attr-defined]  # never counted by the server
            self._close = True  # type: ignore[attr-defined]
            self._refused = True
            return
        self._refused = False
        gauge.open += 1
        super().connection_made(transport)  # type: ignore[misc]

    def connection_lost(self, exc) -> None:
        if not getattr(self, "_refused", True):
            self.gauge.open -= 1
            self._refused = True
        else:  # aiohttp forgets nothing of a connection it never counted: its parser
            self._parser = None  # type: ignore[attr-defined]  # holds it (a cycle)
        super().connection_lost(exc)  # type: ignore[misc]
        release(getattr(self, "_transport_held", None))
        self._transport_held = None

    def log_exception(self, *args, exc_info=None, **kw) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        kind = type(exc).__name__ if exc is not None else "error"
        detail = f": {exc}" if exc is not None and str(exc) else ""
        self.gauge.hush.say(f"client-{kind}", f"{self.gauge.what}: a client's request "
                            f"failed: {kind}{detail}"[:300])

    def log_debug(self, *args, **kw) -> None:
        pass
