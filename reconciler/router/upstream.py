"""The router's upstream side for a streamed answer: one connection, the body as it arrives (SHELL; §9).

A stream (``stream: true``, or Ollama's default) is the one request whose
connection is never reused: llama-server closes its end after an SSE answer,
so the router asks ``Connection: close`` and pools nothing. Such a request
needs none of aiohttp's client (pool, redirects, cookies, a task to write the
body): an asyncio protocol opens the connection, writes the request in one
piece and feeds what it reads to ``world/http11.py``'s sans-IO reader, whose
body bytes the proxy takes and writes to its client as they come.

Why (measured: ``bench/bench_router.py``'s 64 concurrent streams against the
real llama-server, on 2 cores shared with the server and the client): every
microsecond of CPU the router spends per stream or per event is taken from
the server and the client. Measured alone (500 sequential streams to the
testbed's llama-server), aiohttp's client spent 200–300 µs more CPU per stream
than a bare protocol, on a connection it will not reuse (connector, happy
eyeballs, a task to write the body), and about 17 µs more per event; the
bench's docstring has the router's own figures before and after. Everything else
— non-streamed answers (pooled keep-alive connections), the readiness watch —
stays on aiohttp's client.

* ``open_stream``: connect (``Refused`` for any connect error: the server was just
  stopped, the proxy may try once more; ``Failed`` when the connect times
  out), then write the request; ``ValueError`` for a header that cannot go on
  the wire (before any connect);
* ``Stream.head()``: the status and headers (``Failed`` when the server closes
  or sends something that is not HTTP/1.1 first);
* ``Stream.read()``: the next body bytes, ``b""`` once the body has ended
  (``Failed`` when the server closes before then);
* ``Stream.pipe(sink, tail)``: from then on, the body goes straight to the
  client's connection as HTTP/1.1 chunks from the protocol's own callback, as
  it arrives: no task switch, future or ``await`` per event.
  ``Stream.piped()`` returns once the body has ended, or when the client's
  buffer is over ``HIGH`` (reading pauses; the proxy drains, then
  ``resume()``s);
* gathering: while ``GATHER_FROM`` or more streams are piped at once, a stream
  is not read for ``GATHER`` (5 ms) after each write, so what its server sends
  meanwhile is read, and written to the client, in one piece. Measured on the
  64-stream bench (``perf stat``): without it the router made 0.5–0.75 reads
  and as many writes per event, and its client 0.4–0.7 reads; with it
  0.15–0.2, and 0.1. A stream alone is never held: its events go as they
  come. The first piece of an answer is never held (time to first byte), and
  an event waits at most ``GATHER`` plus one turn of the loop;
* ``Stream.close()``: closes the connection, at once (``abort``) when the body
  has not ended, so the server sees its client go and stops generating.

Reading pauses while more than ``HIGH`` bytes wait to be taken (a slow client
slows its server's connection, never the router's memory).
"""

from __future__ import annotations

import asyncio
from typing import Iterable, MutableSequence

from reconciler.router import guard
from reconciler.world import http11

HIGH = 1 << 16  # bytes read and not taken, beyond which reading pauses
GATHER = 0.005  # seconds a piped stream is not read after a write …
GATHER_FROM = 4  # … while this many streams are piped at once (see the module)
_UNCAPPED = 1 << 62  # a relayed body has no cap of ours


class Refused(Exception):
    """The server's port refused (or otherwise failed) the connection: nothing was sent."""


class Failed(Exception):
    """The server failed after the request was sent, or the connect timed out."""


async def open_stream(host: str, port: int, path: str, headers: Iterable[tuple[str, str]],
                      body: bytes, connect_timeout: float) -> Stream:
    """Connect to ``host:port`` and send ``POST path`` (see the module)."""
    stream = Stream()
    wire = stream.conversation.request("POST", path.encode("ascii"), [
        (k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in headers], body)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(connect_timeout):
            await loop.create_connection(lambda: stream, host, port)
    except TimeoutError as exc:  # before OSError: it is one
        raise Failed(f"no connection within {connect_timeout:g}s") from exc
    except OSError as exc:
        raise Refused(exc.strerror or str(exc)) from exc
    stream.send(wire)
    return stream


class Stream(asyncio.Protocol):
    """One request's connection, as an asyncio protocol and the proxy's reader."""

    piping = 0  # streams piped now (in this process)

    def __init__(self) -> None:
        self.conversation = http11.Conversation(_UNCAPPED)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future | None = None
        self._error: str | None = None
        self._ended = False  # the connection is gone
        self._pending = 0  # bytes read since the last take
        self._paused = False
        self._sink: asyncio.WriteTransport | None = None  # see pipe()
        self._tail: MutableSequence[bytes] = []
        self._blocked = False  # the sink's buffer is over HIGH
        self._window: asyncio.TimerHandle | None = None  # GATHER after a write
        self._piped = False  # counted in ``piping``

    # ------------------------------------------------------------ the protocol

    def connection_made(self, transport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.conversation.receive(data)
        except (http11.ProtocolError, http11.TooLarge) as exc:
            self._fail(f"not an HTTP/1.1 answer: {exc}")
            return
        if self._sink is not None:
            self._forward()
            if not (self._blocked or self.conversation.complete):
                return  # nothing for the proxy's task to do
        else:
            self._pending += len(data)
            if self._pending > HIGH:
                self._reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # close our end too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        guard.release(self._transport)  # freed at once, not at a full collection
        if not self.conversation.complete and self._error is None:
            try:
                self.conversation.receive(b"")  # a body framed by the end of the stream ends
            except http11.ProtocolError as error:
                self._error = f"{error}" + (f" ({exc})" if exc else "")
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------ the proxy's side

    def send(self, wire: bytes) -> None:
        assert self._transport is not None
        self._transport.write(wire)

    async def head(self) -> tuple[int, list[tuple[str, str]]]:
        """The final status and headers (names as usually written, values decoded)."""
        while (head := self.conversation.head) is None:
            await self._next()
        status, fields = head
        return status, [(_title(k), v.decode("utf-8", "surrogateescape")) for k, v in fields]

    @property
    def length(self) -> int | None:
        return self.conversation.length

    async def read(self) -> bytes:
        """The body bytes that arrived since the last read; ``b""`` once the body ended."""
        while True:
            data = self.conversation.take()
            if data:
                self._pending = 0
                self._reading()
                return data
            if self.conversation.complete:
                return b""
            await self._next()

    def pipe(self, sink: asyncio.WriteTransport, tail: MutableSequence[bytes]) -> None:
        """From now on, write the body to ``sink`` as HTTP/1.1 chunks as it arrives (the
        client's answer is chunked and its head is sent); each piece also goes to ``tail``."""
        self._sink, self._tail = sink, tail
        if not self._piped:
            self._piped = True
            Stream.piping += 1
        self._forward()

    async def piped(self) -> bool:
        """True once the whole body is written to the sink; False when the sink's buffer is
        over ``HIGH``: drain it, then ``resume()``. ``Failed`` as for ``read``."""
        while not self._blocked:
            if self.conversation.complete:
                return True
            await self._next()
        return False

    def resume(self) -> None:
        """The sink was drained: read on."""
        self._blocked = False
        self._reading()

    def close(self) -> None:
        if self._piped:
            self._piped = False
            Stream.piping -= 1
        if self._window is not None:
            self._window.cancel()
            self._window = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if self.conversation.complete:
                transport.close()
            else:
                transport.abort()

    # ------------------------------------------------------------ inside

    async def _next(self) -> None:
        """Wait for more bytes; Failed when none can come."""
        if self._error is not None:
            raise Failed(self._error)
        if self._ended:
            raise Failed("the server closed the connection")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _forward(self) -> None:
        data = self.conversation.take()
        self._pending = 0  # (bytes read before the pipe began are taken here)
        sink = self._sink
        if not data or sink is None or sink.is_closing():
            return  # (a closing sink: the client went, and its handler is being cancelled)
        self._tail.append(data)
        sink.write(b"%x\r\n%s\r\n" % (len(data), data))
        if sink.get_write_buffer_size() > HIGH:
            self._blocked = True
        if (self._window is None and Stream.piping >= GATHER_FROM
                and not self.conversation.complete):
            self._window = asyncio.get_running_loop().call_later(GATHER, self._gathered)
        self._reading()

    def _gathered(self) -> None:
        self._window = None
        self._reading()

    def _reading(self) -> None:
        """Read from the server unless something holds it: untaken bytes over HIGH, a full
        sink, or the window after a write (what arrives meanwhile is read in one piece)."""
        hold = self._pending > HIGH or self._blocked or self._window is not None
        transport = self._transport
        if hold != self._paused and transport is not None and not transport.is_closing():
            self._paused = hold
            if hold:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message
        if self._transport is not None:
            self._transport.abort()


def _title(name: bytes) -> str:
    """``content-type`` → ``Content-Type`` (the reader lower-cases names; clients are used
    to seeing them as servers write them)."""
    return "-".join(part.capitalize() for part in name.decode("ascii").split("-"))
