"""Sending probe requests (SHELL; an asyncio protocol + the framing of ``http11.py``).

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
For the same reason a request is a bare ``asyncio.Protocol`` on its own
connection rather than a stream reader and writer (~0.26 ms → ~0.15 ms of
client CPU a request, with ``http11.py``'s own framing; bench/bench_observe.py).

``run_exchange`` drives a runtime module's pure exchange generator (see
``runtimes/common.py``), sending each batch of requests concurrently.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from typing import Any, Awaitable, Callable, Mapping

from reconciler import http11
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


def url(host: str, port: int, path: str) -> str:
    return f"http://{_authority(host, port)}{path}"


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _encode(host: str, port: int, request: ProbeRequest) -> tuple[http11.Conversation, bytes]:
    """A fresh conversation and the request's bytes (Host, our headers, JSON body)."""
    body = b""
    headers = [(b"Host", _authority(host, port).encode("ascii")), *_HEADERS]
    if request.body is not None:
        body = json.dumps(request.body, separators=(",", ":")).encode()
        headers.append(_JSON)
    talk = http11.Conversation(MAX_BODY)
    return talk, talk.request(request.method, request.path.encode("ascii"), headers, body)


def _answer(status: int, raw: bytes, latency: float) -> ProbeAnswer:
    text = raw[:_TEXT_KEEP].decode("utf-8", "replace")
    body: Any = None
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    return ProbeAnswer(status=status, body=body, text=text, latency=latency)


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


class _Exchange(asyncio.Protocol):
    """One request written on connect; the answer's bytes fed to its Conversation."""

    def __init__(self, talk: http11.Conversation, outgoing: bytes,
                 done: asyncio.Future[http11.Reply]) -> None:
        self.talk, self.outgoing, self.done = talk, outgoing, done
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        # Closed with a reset once answered: no TIME_WAIT socket is left behind on
        # either side for each probe (the observer reads the socket table every
        # pass, and thousands of them made that slow).
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        transport.write(self.outgoing)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self._feed(data)

    def eof_received(self) -> bool:
        self._feed(b"")
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.done.done():
            self.done.set_exception(exc)  # a reset, with its cause
        self._feed(b"")  # a clean close ends the stream (a no-op once answered)

    def _feed(self, data: bytes) -> None:
        if self.done.done():
            return
        try:
            reply = self.talk.receive(data)
        except Exception as exc:  # TooLarge, ProtocolError: the caller makes them values
            self.done.set_exception(exc)
        else:
            if reply is None:
                return
            self.done.set_result(reply)
        assert self.transport is not None
        self.transport.close()  # the answer is complete (or broken): nothing more is read


async def send(
    host: str, port: int, request: ProbeRequest, *, timeout: float
) -> ProbeAnswer:
    """Send one request on a new connection; never raises for the server's sake."""
    if request.max_timeout is not None:
        timeout = min(timeout, request.max_timeout)
    started = time.perf_counter()

    def failed(kind: ErrorKind, detail: str) -> ProbeAnswer:
        return ProbeAnswer(
            error=kind, error_detail=detail, latency=time.perf_counter() - started
        )

    loop = asyncio.get_running_loop()
    done: asyncio.Future[http11.Reply] = loop.create_future()
    transport = None
    try:
        talk, outgoing = _encode(host, port, request)
        async with asyncio.timeout(timeout):  # connect + total time, not per read
            try:
                transport, _ = await loop.create_connection(
                    lambda: _Exchange(talk, outgoing, done), host, port)
            except ConnectionRefusedError:
                return failed(ErrorKind.REFUSED, "connection refused")
            except OSError as exc:
                return failed(ErrorKind.TRANSPORT, f"cannot connect: {_detail(exc)}")
            reply = await done
        return _answer(reply.status, reply.body, time.perf_counter() - started)
    except TimeoutError:
        return failed(ErrorKind.TIMEOUT, f"within {seconds(timeout)}")
    except http11.TooLarge:
        return failed(ErrorKind.TOO_LARGE, "answer larger than 1 MiB")
    except Exception as exc:  # reset, protocol error, anything else: never take the pass down
        return failed(ErrorKind.TRANSPORT, _detail(exc))
    finally:
        done.cancel()  # no-op once answered; else nothing may set it after we left
        if transport is not None:
            transport.close()


Sender = Callable[[ProbeRequest], Awaitable[ProbeAnswer]]


async def run_exchange(
    exchange: Exchange, sender: Sender, known: Mapping[ProbeRequest, ProbeAnswer] | None = None
) -> dict[str, ProbeAnswer]:
    """Drive a pure exchange: send each yielded batch concurrently, feed the answers back.

    ``known``: answers already in hand (a batch asked earlier); a batch whose
    every request is there is answered from it instead of being sent again.
    """
    try:
        batch = next(exchange)
        while True:
            if known and all(r in known for r in batch):
                answers = tuple(known[r] for r in batch)
            elif len(batch) == 1:  # no task for a batch of one: most batches are
                answers = (await sender(batch[0]),)
            else:
                answers = tuple(await asyncio.gather(*(sender(r) for r in batch)))
            batch = exchange.send(answers)
    except StopIteration as done:
        return done.value


async def post_json_async(
    host: str, port: int, path: str, body: Any, *, timeout: float
) -> ProbeAnswer:
    """POST a JSON body with the probe hygiene (Ollama load/unload, deep health)."""
    return await send(
        host, port, ProbeRequest(method="POST", path=path, body=body), timeout=timeout
    )


def post_json(host: str, port: int, path: str, body: Any, *, timeout: float) -> ProbeAnswer:
    """Blocking ``post_json_async`` for callers without an event loop."""
    return asyncio.run(post_json_async(host, port, path, body, timeout=timeout))


def send_sync(host: str, port: int, request: ProbeRequest, *, timeout: float) -> ProbeAnswer:
    """Blocking ``send`` for callers without an event loop."""
    return asyncio.run(send(host, port, request, timeout=timeout))
