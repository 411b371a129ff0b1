"""The status page's HTTP answers, whichever server carries them (SHELL; BEHAVIOUR §11).

``Site`` holds the latest ``Snapshot`` (``publish``, from the daemon's
thread after every pass) and answers GET requests (``answer``, on a server's
asyncio loop): the router's aiohttp server carries it on the router's port
(``router/proxy.py``), ``statusserver.py`` on ``status_page.listen``. It is
read-only: no answer changes anything.

=====================  ==================================================
``/``                  the page (``?role=`` filters the events, ``?log=``
                       shows a role's last log lines: the page without JS)
``/status/page.js``    the page's script (the CSP allows scripts from here)
``/status/live``       the ``#live`` part alone, which the script swaps in
``/status/stream``     server-sent events: ``pass`` with the snapshot's
                       version, at once and after every publish (pushed)
``/status/logs?role``  server-sent events: the role's last lines, then what
                       is appended, across restarts (``logtail.Follower``)
=====================  ==================================================

With a key (``api_key_file``) every request needs ``Authorization: Bearer
KEY`` or HTTP Basic with KEY as the password (a browser asks once and sends
it with the script's requests too); otherwise 401.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import threading
from typing import AsyncIterator, Callable, Mapping
from urllib.parse import parse_qs

import attrs

from reconciler.report import page
from reconciler.report.snapshot import Snapshot

LOG_LINES = 100  # lines a log panel starts with
POLL = 0.25  # seconds between looks at a followed log
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream

_HEADERS = (("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
            ("Cache-Control", "no-store"), ("X-Frame-Options", "DENY"))


@attrs.frozen(kw_only=True)
class Answer:
    """A whole answer (``body``), or a stream of server-sent events (``chunks``)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunks: AsyncIterator[bytes] | None = attrs.field(default=None, eq=False)


def _answer(status: int, body: str, kind: str = "text/plain; charset=utf-8",
            extra: tuple[tuple[str, str], ...] = ()) -> Answer:
    return Answer(status=status, body=body.encode(),
                  headers=(("Content-Type", kind), ("Content-Security-Policy", page.csp()),
                           *_HEADERS, *extra))


def _sse(chunks: AsyncIterator[bytes]) -> Answer:
    return Answer(headers=(("Content-Type", "text/event-stream; charset=utf-8"),
                           *_HEADERS, ("X-Accel-Buffering", "no")), chunks=chunks)


def sse_event(kind: str, data: str) -> bytes:
    """One server-sent event; each line of ``data`` is its own ``data:`` field."""
    lines = data.split("\n")
    return (f"event: {kind}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


def authorized(key_ok: Callable[[str], bool] | None, header: str | None) -> bool:
    """``Bearer KEY``, or Basic with KEY as the password, where ``key_ok(KEY)``; anything
    when there is no key (``key_ok`` None)."""
    if key_ok is None:
        return True
    scheme, _, value = (header or "").strip().partition(" ")
    given = value.strip()
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(given, validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
    elif scheme.lower() != "bearer":
        return False
    return bool(given) and key_ok(given)


def key_check(key: str | None) -> Callable[[str], bool] | None:
    """``authorized``'s check for one key (compared in constant time); None: no key."""
    if key is None:
        return None
    return lambda given: hmac.compare_digest(given.encode(), key.encode())


class Site:
    """The latest snapshot and the answers made from it; ``publish`` from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = Snapshot()
        self._page: tuple[int, str] | None = None  # (version, the plain page) cache
        self._watchers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.log_dirs: dict[str, str] = {}  # role → its instance directory (for the logs)
        self._ended = 0  # bumped by ``end_streams``: the streams open before it return

    # ------------------------------------------------------------ the daemon's side

    def publish(self, snapshot: Snapshot, log_dirs: Mapping[str, str] | None = None) -> None:
        with self._lock:
            snapshot = attrs.evolve(snapshot, version=self._snapshot.version + 1)
            self._snapshot = snapshot
            if log_dirs is not None:
                self.log_dirs = dict(log_dirs)
            watchers = list(self._watchers)
        for loop, event in watchers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # that loop is closed: its stream is gone

    def end_streams(self) -> None:
        """End every open stream (the daemon stops): its server can then close at once."""
        with self._lock:
            self._ended += 1
            watchers = list(self._watchers)
        for loop, event in watchers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass

    @property
    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    # ------------------------------------------------------------ a server's side

    async def answer(self, method: str, path: str, query: str, authorization: str | None,
                     *, key_ok: Callable[[str], bool] | None = None) -> Answer:
        if not authorized(key_ok, authorization):
            return _answer(401, "a valid key is required (Authorization: Bearer, or Basic "
                           "with the key as the password)\n",
                           extra=(("WWW-Authenticate", 'Basic realm="reconciler"'),))
        if method not in ("GET", "HEAD"):
            return _answer(405, "the status page is read-only\n", extra=(("Allow", "GET"),))
        args = {k: v[0] for k, v in parse_qs(query).items() if v}
        if path == "/":
            return self._page_answer(args.get("role"), args.get("log"))
        if path == page.SCRIPT_PATH:
            return _answer(200, page.SCRIPT, "text/javascript; charset=utf-8")
        if path == "/status/live":
            return _answer(200, page.render_live(self.snapshot, role_filter=args.get("role")),
                           "text/html; charset=utf-8")
        if path == "/status/stream":
            return _sse(self._passes())
        if path == "/status/logs":
            role = args.get("role", "")
            if role not in self.log_dirs:
                return _answer(404, f"no server log for {role!r}\n")
            return _sse(self._log(role))
        return _answer(404, f"no page {path}\n")

    def _page_answer(self, role: str | None, log: str | None) -> Answer:
        snapshot = self.snapshot
        if not role and not log:
            cached = self._page
            if cached is None or cached[0] != snapshot.version:
                cached = self._page = (snapshot.version, page.render(snapshot))
            return _answer(200, cached[1], "text/html; charset=utf-8")
        lines = None
        if log:
            lines = tuple(b.decode("utf-8", "replace").rstrip("\n")
                          for b in self._last_lines(log))
        return _answer(200, page.render(snapshot, role_filter=role, log_role=log,
                                        log_lines=lines), "text/html; charset=utf-8")

    def _last_lines(self, role: str) -> list[bytes]:
        from reconciler.world import logtail

        where = self.log_dirs.get(role)
        return logtail.last_lines(where, LOG_LINES) if where else []

    async def _passes(self) -> AsyncIterator[bytes]:
        """``pass`` now and after every publish (a stream per open page)."""
        event = asyncio.Event()
        watcher = (asyncio.get_running_loop(), event)
        with self._lock:
            self._watchers.add(watcher)
        ended = self._ended
        try:
            yield b"retry: 2000\n\n"
            while self._ended == ended:
                event.clear()
                yield sse_event("pass", str(self.snapshot.version))
                try:
                    await asyncio.wait_for(event.wait(), KEEPALIVE)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
        finally:
            with self._lock:
                self._watchers.discard(watcher)

    async def _log(self, role: str) -> AsyncIterator[bytes]:
        """The role's last lines, then what is appended, like ``reconcile logs --follow``."""
        from reconciler.world import logtail

        where = self.log_dirs[role]
        follower = logtail.Follower(where, lambda: self.log_dirs.get(role, where))
        partial, quiet, ended = b"", 0.0, self._ended
        try:
            yield sse_event("note", f"following {where}/server.log")
            for line in logtail.last_lines(where, LOG_LINES, end=follower.start):
                yield sse_event("line", line.decode("utf-8", "replace").rstrip("\n"))
            while self._ended == ended:
                data = follower.read()
                if follower.moved:
                    yield sse_event("note", f"following {follower.where}/server.log "
                                    "(a new instance of the role)")
                if data:
                    quiet = 0.0
                    *lines, partial = (partial + data).split(b"\n")
                    for line in lines:
                        yield sse_event("line", line.decode("utf-8", "replace"))
                else:
                    quiet += POLL
                    if quiet >= KEEPALIVE:
                        quiet = 0.0
                        yield b": keep-alive\n\n"
                    await asyncio.sleep(POLL)
        finally:
            follower.close()
