"""Sending probe requests (SHELL; a selector over non-blocking sockets + ``http11.py``'s framing).

Every request follows the §2 hygiene: redirects are never followed (a 3xx is
an answer like any other), proxy environment variables are never read, each
request opens its own connection (sent with ``Connection: close``; nothing is
pooled or reused; reset once answered, so no TIME_WAIT socket is left behind),
connect *and* total time are bounded by the timeout, and
bodies over 1 MiB are a transport error, cut off while reading. Nothing here
raises for a server's behaviour: the outcome is a ``ProbeAnswer`` value.

Why not httpx: probing 200 servers at once took 4-8x one probe, nearly all of
it client CPU (~1 ms a request for ``httpx.AsyncClient`` + httpcore + anyio;
~0.4 ms with a custom httpx transport and no client, the rest being
``httpx.Request``/``Response`` objects). A plain HTTP/1.1 request to a
loopback server needs none of what a client brings, and the hygiene forbids
most of it (redirects, proxies, pooling, a cookie jar shared between servers).
For the same reason a request is a non-blocking socket driven by readiness
callbacks, not a stream or a protocol transport: with ``http11.py``'s own
framing, ~0.26 ms of client CPU a request became ~0.09 ms
(bench/bench_observe.py measures the whole observer). The callbacks are
served by one ``selectors`` selector (``Wires``), not an asyncio loop: every
caller waits for its answers anyway, and importing asyncio (with ssl and
concurrent.futures) was ~12 ms of every ``reconcile --once``.

``exchange`` drives a runtime module's pure exchange generator (see
``runtimes/common.py``), sending each batch of requests concurrently; many
exchanges share one ``Wires`` and run side by side.

Size: a request's whole life in one place — its bytes, its socket from connect
to reset, the selector that serves it, the answer it becomes — so each §2 rule
is read, and changed, once.
"""

from __future__ import annotations

import errno
import functools
import heapq
import json
import os
import selectors
import socket
import struct
import time
from typing import Any, Callable, Mapping

from reconciler.core.loopback import ip_of
from reconciler.world import http11
from reconciler.runtimes.common import (
    MAX_BODY,
    ErrorKind,
    Exchange,
    ProbeAnswer,
    ProbeRequest,
    seconds,
)

_HEADERS = (
    (b"User-Agent", b"reconciler-probe"),
    (b"Accept", b"*/*"),
    (b"Accept-Encoding", b"identity"),
)
_JSON = (b"Content-Type", b"application/json")
_TEXT_KEEP = 2000  # characters of the body kept for messages
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection
_READ = 65536


def url(host: str, port: int, path: str) -> str:
    return f"http://{_authority(host, port)}{path}"


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _encode(host: str, port: int, request: ProbeRequest,
            key: str | None = None) -> tuple[http11.Conversation, bytes]:
    """A fresh conversation and the request's bytes (Host, our headers, the role's API key
    when its server wants one, JSON body)."""
    body = b""
    headers = [(b"Host", _authority(host, port).encode("ascii")), *_HEADERS]
    if key:
        headers.append((b"Authorization", b"Bearer " + key.encode("utf-8")))
    if request.body is not None:
        body = json.dumps(request.body, separators=(",", ":")).encode()
        headers.append(_JSON)
    talk = http11.Conversation(MAX_BODY)
    return talk, talk.request(request.method, request.path.encode("ascii"), headers, body)


def _answer(status: int, raw: bytes, latency: float, keep: int | None = None) -> ProbeAnswer:
    text = raw[:keep or _TEXT_KEEP].decode("utf-8", "replace")
    body: Any = None
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    return ProbeAnswer(status=status, body=body, text=text, latency=latency)


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


class _CannotConnect(Exception):
    """connect() failed for another reason than a refusal (the errno says which)."""


Done = Callable[[ProbeAnswer], None]


class Wires:
    """Requests in flight on non-blocking sockets, driven by one selector (epoll).

    ``ask`` starts a request and calls its ``then`` with the ``ProbeAnswer``
    once it is answered, failed or past its time; ``run`` waits on the
    sockets until nothing is in flight. Callbacks may ask again (the next
    batch of an exchange), and ``run`` serves those too. No thread: every
    callback runs inside ``run`` (or inside ``ask``, when connect() fails at
    once).
    """

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._deadlines: list[tuple[float, int, _Wire]] = []  # a heap; answered ones stay
        self._count = 0
        self.live = 0

    def ask(self, host: str, port: int, request: ProbeRequest, *, timeout: float,
            key: str | None = None, then: Done) -> None:
        """Send ``request`` on a new connection; ``then(answer)`` when it is over."""
        if request.max_timeout is not None:
            timeout = min(timeout, request.max_timeout)
        wire = _Wire(self, request, timeout, then)
        try:
            if ip_of(host) is None:  # a probe goes to an address, never through DNS
                raise ValueError(f"{host!r} does not appear to be an IPv4 or IPv6 address")
            err = wire.start(host, port, *_encode(host, port, request, key))
        except Exception as exc:  # a bad address, no socket left: never take the pass down
            wire.end(exc)  # (outside the try, what ``then`` raises is raised, not answered)
            return
        if err:
            wire.connect_failed(err)
            return
        self._count += 1
        heapq.heappush(self._deadlines, (wire.deadline, self._count, wire))

    def run(self) -> None:
        """Serve the sockets until every request asked (also from callbacks) is over."""
        select, deadlines = self.selector.select, self._deadlines
        while self.live:
            while deadlines and deadlines[0][2].sock is None:
                heapq.heappop(deadlines)  # answered before its time
            now = time.perf_counter()
            while deadlines and deadlines[0][0] <= now:
                heapq.heappop(deadlines)[2].end(TimeoutError())
            if not self.live:
                break
            wait = max(0.0, deadlines[0][0] - now) if deadlines else None
            for key, mask in select(wait):
                wire = key.data
                if wire.sock is None:
                    continue  # ended by an earlier event of this round
                if mask & selectors.EVENT_WRITE:
                    wire.writable()
                if mask & selectors.EVENT_READ and wire.sock is not None:
                    wire.readable()

    def close(self) -> None:
        """Close the selector and any socket still in flight (a run a callback broke off)."""
        for _, _, wire in self._deadlines:
            wire.drop()
        self._deadlines.clear()
        self.selector.close()


class _Wire:
    """One request on a non-blocking socket: connect → (writable) check the outcome, write
    the request → (readable) feed the bytes to the Conversation until it has the Reply.
    Connect *and* total time are bounded by ``timeout`` (``deadline``)."""

    __slots__ = ("wires", "request", "timeout", "then", "started", "deadline", "sock", "fd",
                 "talk", "pending", "connected", "events")

    def __init__(self, wires: Wires, request: ProbeRequest, timeout: float, then: Done) -> None:
        self.wires, self.request, self.timeout, self.then = wires, request, timeout, then
        self.started = time.perf_counter()
        self.deadline = self.started + timeout
        self.sock: socket.socket | None = None
        self.fd, self.connected, self.events = -1, False, 0

    def start(self, host: str, port: int, talk: http11.Conversation, outgoing: bytes) -> int:
        """Connect (non-blocking); the errno of a connect() that failed at once, else 0."""
        self.talk, self.pending = talk, outgoing
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        self.sock, self.fd = sock, sock.fileno()
        self.wires.live += 1
        sock.setblocking(False)
        # Closed with a reset once answered: no TIME_WAIT socket is left behind on
        # either side for each probe (the observer reads the socket table every
        # pass, and thousands of them made that slow).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        err = sock.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            return err
        self._watch(selectors.EVENT_WRITE)
        return 0

    def _watch(self, events: int) -> None:
        if events == self.events:
            return
        selector = self.wires.selector
        if not self.events:
            selector.register(self.fd, events, self)
        else:
            selector.modify(self.fd, events, self)
        self.events = events

    def writable(self) -> None:
        if not self.connected:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
            if err:
                self.connect_failed(err)
                return
            self.connected = True
        try:
            sent = self.sock.send(self.pending)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.end(exc)
            return
        self.pending = self.pending[sent:]
        self._watch(selectors.EVENT_READ | (selectors.EVENT_WRITE if self.pending else 0))

    def readable(self) -> None:
        try:
            data = self.sock.recv(_READ)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # a reset, with its cause
            self.end(exc)
            return
        try:
            reply = self.talk.receive(data)  # b"": the peer closed
        except Exception as exc:  # TooLarge, ProtocolError: made values below
            self.end(exc)
            return
        if reply is not None:
            self.end(reply)

    def connect_failed(self, err: int) -> None:
        error = OSError(err, os.strerror(err))
        self.end(ConnectionRefusedError(err, os.strerror(err)) if err == errno.ECONNREFUSED
                 else _CannotConnect(f"{type(error).__name__}: {error}"))

    def drop(self) -> None:
        """Close without an answer (``Wires.close`` of a run that was broken off)."""
        self.then = None
        if self.sock is not None:
            self.end(TimeoutError())

    def end(self, outcome: http11.Reply | BaseException) -> None:
        """Close (unregistered first) and hand the answer on; only the first end counts."""
        if self.sock is not None:
            if self.events:
                self.wires.selector.unregister(self.fd)
            self.sock.close()
            self.sock, self.fd = None, -1
            self.wires.live -= 1
        then, self.then = self.then, None
        if then is not None:
            then(_outcome(outcome, self.request, self.started, self.timeout))


def _outcome(outcome: http11.Reply | BaseException, request: ProbeRequest, started: float,
             timeout: float) -> ProbeAnswer:
    """The ``ProbeAnswer`` of a request's end: never an exception for the server's sake."""
    latency = time.perf_counter() - started
    if isinstance(outcome, http11.Reply):
        return _answer(outcome.status, outcome.body, latency, request.text_limit)
    if isinstance(outcome, ConnectionRefusedError):
        kind, detail = ErrorKind.REFUSED, "connection refused"
    elif isinstance(outcome, _CannotConnect):
        kind, detail = ErrorKind.TRANSPORT, f"cannot connect: {outcome}"
    elif isinstance(outcome, TimeoutError):
        kind, detail = ErrorKind.TIMEOUT, f"within {seconds(timeout)}"
    elif isinstance(outcome, http11.TooLarge):
        kind, detail = ErrorKind.TOO_LARGE, "answer larger than 1 MiB"
    else:  # reset, protocol error, anything else: never take the pass down
        kind, detail = ErrorKind.TRANSPORT, _detail(outcome)
    return ProbeAnswer(error=kind, error_detail=detail, latency=latency)


def send_sync(host: str, port: int, request: ProbeRequest, *, timeout: float,
              key: str | None = None) -> ProbeAnswer:
    """Send one request on a new connection and wait for its answer; never raises for the
    server's sake. ``key``: the role's API key (``api_key``), sent as ``Authorization: Bearer``.
    """
    got: list[ProbeAnswer] = []
    wires = Wires()
    try:
        wires.ask(host, port, request, timeout=timeout, key=key, then=got.append)
        wires.run()
    finally:
        wires.close()
    return got[0]


def exchange(wires: Wires, steps: Exchange, send: Callable[[ProbeRequest, Done], None],
             known: Mapping[ProbeRequest, ProbeAnswer] | None,
             then: Callable[[dict[str, ProbeAnswer]], None]) -> None:
    """Drive a pure exchange on ``wires``: send each yielded batch concurrently, feed the
    answers back, ``then(result)`` at its end (see ``runtimes/common.py``).

    ``send(request, done)`` asks one request; ``known``: answers already in hand (a batch
    asked earlier); a batch whose every request is there is answered from it instead of
    being sent again.
    """

    def step(answers: tuple[ProbeAnswer, ...] | None) -> None:
        while True:
            try:
                batch = next(steps) if answers is None else steps.send(answers)
            except StopIteration as done:
                then(done.value)
                return
            if not (known and all(r in known for r in batch)):
                break
            answers = tuple(known[r] for r in batch)
        slots: list[ProbeAnswer | None] = [None] * len(batch)
        left = [len(batch)]

        def got(i: int, answer: ProbeAnswer) -> None:
            slots[i] = answer
            left[0] -= 1
            if not left[0]:
                step(tuple(slots))  # type: ignore[arg-type]

        for i, request in enumerate(batch):
            send(request, functools.partial(got, i))

    step(None)


def run_exchange(steps: Exchange, host: str, port: int, *, timeout: float,
                 key: str | None = None) -> dict[str, ProbeAnswer]:
    """One exchange with one server, to its end (``capabilities``, ``health``)."""
    result: list[dict[str, ProbeAnswer]] = []
    wires = Wires()
    try:
        exchange(wires, steps,
                 lambda request, done: wires.ask(host, port, request, timeout=timeout, key=key,
                                                 then=done),
                 None, result.append)
        wires.run()
    finally:
        wires.close()
    return result[0]


def post_json(host: str, port: int, path: str, body: Any, *, timeout: float) -> ProbeAnswer:
    """POST a JSON body with the probe hygiene (Ollama load/unload, deep health)."""
    return send_sync(host, port, ProbeRequest(method="POST", path=path, body=body),
                     timeout=timeout)


def api_key(path: str | None) -> str | None:
    """The key a role's server wants (``spec.serve.api_key_file``): the file's first line that
    is neither empty nor a ``#`` comment, as llama-server reads it; None when unreadable.
    It is sent, never logged, recorded or shown."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            for line in f.read(65536).splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    return line.strip()
    except (OSError, ValueError):
        return None
    return None
