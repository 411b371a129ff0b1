"""Sending probe requests (SHELL; asyncio's selector loop + the framing of ``http11.py``).

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
For the same reason a request is a non-blocking socket driven by the event
loop's reader and writer callbacks, not a stream or a protocol transport: with
``http11.py``'s own framing, ~0.26 ms of client CPU a request became ~0.09 ms
(bench/bench_observe.py measures the whole observer).

``run_exchange`` drives a runtime module's pure exchange generator (see
``runtimes/common.py``), sending each batch of requests concurrently.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import socket
import struct
import time
from typing import Any, Awaitable, Callable, Mapping

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


class _Wire:
    """One request on a non-blocking socket, driven by the loop's reader/writer callbacks.

    connect → (writable) check the outcome, write the request → (readable) feed
    the bytes to the Conversation until it has the Reply, which resolves ``done``.
    No transport, stream or task: nothing here outlives the request.
    """

    def __init__(self, host: str, port: int, talk: http11.Conversation, outgoing: bytes) -> None:
        self.loop = asyncio.get_running_loop()
        self.address = (host, port)
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                                  socket.SOCK_STREAM)
        self.fd = self.sock.fileno()
        self.talk, self.pending = talk, outgoing
        self.done: asyncio.Future[http11.Reply] = self.loop.create_future()

    def start(self) -> asyncio.Future[http11.Reply]:
        self.sock.setblocking(False)
        # Closed with a reset once answered: no TIME_WAIT socket is left behind on
        # either side for each probe (the observer reads the socket table every
        # pass, and thousands of them made that slow).
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        err = self.sock.connect_ex(self.address)
        if err not in (0, errno.EINPROGRESS):
            self._connect_failed(err)
        else:
            self.loop.add_writer(self.fd, self._connected)
        return self.done

    def _connected(self) -> None:
        self.loop.remove_writer(self.fd)
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._connect_failed(err)
        else:
            self.loop.add_reader(self.fd, self._read)
            self._write()

    def _connect_failed(self, err: int) -> None:
        error = OSError(err, os.strerror(err))
        self._end(ConnectionRefusedError(err, os.strerror(err)) if err == errno.ECONNREFUSED
                  else _CannotConnect(f"{type(error).__name__}: {error}"))

    def _write(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._end(exc)
            return
        self.pending = self.pending[sent:]
        if self.pending:
            self.loop.add_writer(self.fd, self._write)
        else:
            self.loop.remove_writer(self.fd)

    def _read(self) -> None:
        try:
            data = self.sock.recv(_READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # a reset, with its cause
            self._end(exc)
            return
        try:
            reply = self.talk.receive(data)  # b"": the peer closed
        except Exception as exc:  # TooLarge, ProtocolError: the caller makes them values
            self._end(exc)
            return
        if reply is not None:
            self._end(reply)

    def _end(self, outcome: http11.Reply | Exception) -> None:
        self.close()
        if self.done.done():
            return
        if isinstance(outcome, Exception):
            self.done.set_exception(outcome)
        else:
            self.done.set_result(outcome)

    def close(self) -> None:
        """Unregister and close (idempotent); the answer, if any, is complete or abandoned."""
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.fd = -1
            self.sock.close()


async def send(
    host: str, port: int, request: ProbeRequest, *, timeout: float, key: str | None = None
) -> ProbeAnswer:
    """Send one request on a new connection; never raises for the server's sake.

    ``key``: the role's API key (``api_key``), sent as ``Authorization: Bearer``.
    """
    if request.max_timeout is not None:
        timeout = min(timeout, request.max_timeout)
    started = time.perf_counter()

    def failed(kind: ErrorKind, detail: str) -> ProbeAnswer:
        return ProbeAnswer(
            error=kind, error_detail=detail, latency=time.perf_counter() - started
        )

    wire = None
    try:
        ipaddress.ip_address(host)  # a probe goes to an address, never through DNS
        wire = _Wire(host, port, *_encode(host, port, request, key))
        async with asyncio.timeout(timeout):  # connect + total time, not per read
            reply = await wire.start()
        return _answer(reply.status, reply.body, time.perf_counter() - started,
                       request.text_limit)
    except ConnectionRefusedError:
        return failed(ErrorKind.REFUSED, "connection refused")
    except _CannotConnect as exc:
        return failed(ErrorKind.TRANSPORT, f"cannot connect: {exc}")
    except TimeoutError:
        return failed(ErrorKind.TIMEOUT, f"within {seconds(timeout)}")
    except http11.TooLarge:
        return failed(ErrorKind.TOO_LARGE, "answer larger than 1 MiB")
    except Exception as exc:  # reset, protocol error, anything else: never take the pass down
        return failed(ErrorKind.TRANSPORT, _detail(exc))
    finally:
        if wire is not None:
            wire.close()
            wire.done.cancel()  # a no-op once answered


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


def send_sync(host: str, port: int, request: ProbeRequest, *, timeout: float,
              key: str | None = None) -> ProbeAnswer:
    """Blocking ``send`` for callers without an event loop."""
    return asyncio.run(send(host, port, request, timeout=timeout, key=key))


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
