"""The router's upstream side for streamed answers (``router/upstream.py``), against raw servers.

Each server here is a plain asyncio socket server that writes exactly the
bytes a case gives, so every framing (chunked, a length, to the end of the
stream) and every failure (refused, closed early, not HTTP) is exercised
without aiohttp on the server's side.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from reconciler.router import upstream

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


async def _serve(parts: list[bytes], *, pause: float = 0.0, got: list[bytes] | None = None,
                 close: bool = True):
    """A server that reads the request, then writes ``parts`` one by one."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            request = head + await reader.readexactly(length)
            if got is not None:
                got.append(request)
            for part in parts:
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(pause)
            if not close:
                await reader.read()  # until the client goes
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _open(port: int, **kw) -> upstream.Stream:
    return await upstream.open_stream("127.0.0.1", port, "/v1/completions",
                                      [("Host", f"127.0.0.1:{port}"),
                                       ("Content-Type", "application/json")],
                                      b'{"stream":true}', kw.get("timeout", 2.0))


async def _piping(port: int, sink: Sink | None = None) -> tuple[upstream.Stream, Sink]:
    """A stream past its head and first piece, piped into ``sink`` (a new one by default)."""
    stream = await _open(port)
    await stream.head()
    await stream.read()
    sink = sink if sink is not None else Sink()
    stream.pipe(sink, [])
    return stream, sink


async def _body(stream: upstream.Stream) -> list[bytes]:
    pieces = []
    while piece := await stream.read():
        pieces.append(piece)
    return pieces


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 10))


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_each_framing_is_relayed_piece_by_piece_to_its_end(framing: str) -> None:
    """§9 a streamed answer, chunked, sized or closed-delimited, reaches the client piece by piece
    as it came, whole, never held back for the rest."""
    events = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    if framing == "chunked":
        parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n"]
        parts += [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    elif framing == "length":
        parts = [HEAD + b"content-length: %d\r\n\r\n" % sum(map(len, events)), *events]
    else:
        parts = [HEAD + b"\r\n", *events]

    async def test() -> None:
        got: list[bytes] = []
        server, port = await _serve(parts, pause=0.02, got=got)
        async with server:
            stream = await _open(port)
            status, fields = await stream.head()
            assert status == 200 and ("Content-Type", "text/event-stream") in fields
            assert stream.length == (sum(map(len, events)) if framing == "length" else None)
            pieces = await _body(stream)
            stream.close()
        assert b"".join(pieces) == b"".join(events)
        assert len(pieces) == len(events)  # as they came, never held back for the rest
        request = got[0]
        assert request.startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert b"Connection: close\r\n" in request and request.endswith(b'{"stream":true}')
    run(test())


def test_a_refused_port_is_refused_and_nothing_is_sent() -> None:
    """§9 a port nobody listens on is ``Refused`` (the router's 502 path), not a failure mid-answer."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: the connect is refused

        async def test() -> None:
            with pytest.raises(upstream.Refused):
                await _open(port)
        run(test())


@pytest.mark.parametrize("parts, when", [
    ([], "head"),  # takes the request, closes without a word
    ([b"SSH-2.0-OpenSSH\r\n"], "head"),  # not HTTP
    ([HEAD + b"transfer-encoding: chunked\r\n\r\n", b"9\r\ndata: 1\n\n\r\n"], "body"),  # no end
    ([HEAD + b"content-length: 100\r\n\r\n", b"data: 1\n\n"], "body"),  # short of its length
    ([HEAD + b"transfer-encoding: chunked\r\n\r\n", b"zz\r\n"], "body"),  # bad chunk size
])
def test_a_server_that_fails_is_failed_where_it_failed(parts: list[bytes], when: str) -> None:
    """§9 a server that breaks its answer fails the stream where it broke: in the head, or in the
    body after it."""
    async def test() -> None:
        server, port = await _serve(parts)
        async with server:
            stream = await _open(port)
            if when == "head":
                with pytest.raises(upstream.Failed):
                    await stream.head()
            else:
                await stream.head()
                with pytest.raises(upstream.Failed):
                    await _body(stream)
            stream.close()
    run(test())


def test_the_body_read_before_a_failure_is_still_given() -> None:
    """§9 the pieces read before the server failed are handed on first; the failure comes with the
    next read."""
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n"]

    async def test() -> None:
        server, port = await _serve(parts)
        async with server:
            stream = await _open(port)
            await stream.head()
            assert await stream.read() == b"data: 1\n\n"
            with pytest.raises(upstream.Failed):
                await stream.read()
            stream.close()
    run(test())


def test_interim_answers_are_skipped() -> None:
    """HTTP/1.1: a 1xx interim answer is skipped; the head given is the final answer's."""
    parts = [b"HTTP/1.1 100 Continue\r\n\r\n", HEAD + b"content-length: 2\r\n\r\nok"]

    async def test() -> None:
        server, port = await _serve(parts)
        async with server:
            stream = await _open(port)
            assert (await stream.head())[0] == 200
            assert await _body(stream) == [b"ok"]
            stream.close()
    run(test())


def test_reading_pauses_while_the_untaken_bytes_are_over_the_mark() -> None:
    """§9 back-pressure: reading stops while more than ``HIGH`` bytes wait untaken, resumes once
    taken, and loses no byte."""
    big = b"x" * (upstream.HIGH * 4)
    parts = [HEAD + b"content-length: %d\r\n\r\n" % len(big), big]

    async def test() -> None:
        server, port = await _serve(parts, close=False)
        async with server:
            stream = await _open(port)
            await stream.head()
            for _ in range(100):
                if stream._paused:  # noqa: SLF001
                    break
                await asyncio.sleep(0.01)
            assert stream._paused  # noqa: SLF001  (nobody took: it stopped reading)
            taken = len(await stream.read())
            assert not stream._paused and taken <= upstream.HIGH * 2  # noqa: SLF001
            rest = b"".join(await _body(stream))
            assert taken + len(rest) == len(big)
            stream.close()
    run(test())


def test_a_header_that_cannot_go_on_the_wire_is_a_value_error_before_any_connect() -> None:
    """A header with CR/LF in it (an injection) is a ValueError before any connection is opened."""
    async def test() -> None:
        with pytest.raises(ValueError):
            await upstream.open_stream("127.0.0.1", 9, "/v1/completions",
                                       [("X-Bad", "a\r\nInjected: 1")], b"{}", 1.0)
    run(test())


def test_closing_mid_answer_closes_the_connection() -> None:
    """The client went (its handler is cancelled): the server sees its connection go."""
    seen: list[bool] = []

    async def test() -> None:
        async def handle(reader, writer) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(len(b'{"stream":true}'))
            writer.write(HEAD + b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
            try:
                seen.append(await reader.read() == b"")  # our end closed
            except ConnectionError:
                seen.append(True)  # … at once: reset
            finally:
                writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            stream = await _open(server.sockets[0].getsockname()[1])
            await stream.head()
            await stream.read()
            stream.close()
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
    run(test())
    assert seen == [True]


class Sink:
    """The client's side of a pipe: what was written, a buffer size the test sets."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.buffered = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered


def test_a_pipe_writes_each_piece_as_a_chunk_until_the_body_ends() -> None:
    """§9 piping: each piece after the first goes to the client as one chunk, in order, until the
    body ends."""
    events = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n"]
    parts += [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]

    async def test() -> None:
        server, port = await _serve(parts, pause=0.02)
        async with server:
            stream = await _open(port)
            await stream.head()
            first = await stream.read()
            sink, tail = Sink(), []
            stream.pipe(sink, tail)
            assert await stream.piped() is True
            stream.close()
        assert [first, *tail] == events  # each piece as it came
        assert sink.written == [b"%x\r\n%s\r\n" % (len(e), e) for e in events[1:]]
    run(test())


def test_a_full_sink_pauses_reading_until_resumed() -> None:
    """§9 a client that reads nothing pauses the upstream read (nothing more is taken) until it
    drains and resumes."""
    events = [b"data: %d\n\n" % i for i in range(4)]
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n"]
    parts += [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]

    async def test() -> None:
        server, port = await _serve(parts, pause=0.02, close=False)
        async with server:
            sink = Sink()
            sink.buffered = upstream.HIGH + 1  # the client reads nothing
            stream, _ = await _piping(port, sink)
            assert await stream.piped() is False  # the next piece filled it: drain first
            assert stream._paused and len(sink.written) == 1  # noqa: SLF001
            await asyncio.sleep(0.15)
            assert len(sink.written) == 1  # nothing read while paused
            sink.buffered = 0
            stream.resume()
            assert await stream.piped() is True
            assert b"".join(sink.written).endswith(b"data: 3\n\n\r\n")
            stream.close()
    run(test())


def test_a_pipe_whose_server_fails_mid_body_is_failed() -> None:
    """§9 a pipe whose server fails mid-body ends ``Failed``, after writing what came before the
    failure."""
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n", b"9\r\ndata: 2\n\n\r\n"]

    async def test() -> None:
        server, port = await _serve(parts, pause=0.02)
        async with server:
            stream, sink = await _piping(port)
            with pytest.raises(upstream.Failed):
                await stream.piped()
            assert sink.written == [b"9\r\ndata: 2\n\n\r\n"]  # what came before the failure
            stream.close()
    run(test())


def _events(count: int) -> list[bytes]:
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n"]
    for i in range(count):
        event = b"data: %d\n\n" % i
        parts.append(b"%x\r\n%s\r\n" % (len(event), event))
    return [*parts, b"0\r\n\r\n"]


@pytest.mark.parametrize("others", [0, upstream.GATHER_FROM - 1])
def test_under_many_streams_what_arrives_within_the_window_is_written_in_one_piece(
        monkeypatch, others: int) -> None:
    """With ``GATHER_FROM`` streams piped, events 3 ms apart go out in fewer, larger
    writes; a stream alone writes each event as it comes."""
    monkeypatch.setattr(upstream, "GATHER", 0.05)
    monkeypatch.setattr(upstream.Stream, "piping", others)

    async def test() -> None:
        server, port = await _serve(_events(20), pause=0.003)
        async with server:
            stream, sink = await _piping(port)
            assert await stream.piped() is True
            stream.close()
        assert b"".join(sink.written).endswith(b"data: 19\n\n\r\n")
        if others:
            assert len(sink.written) <= 4  # ~60 ms of events in 50 ms windows
        else:
            assert len(sink.written) >= 8  # each as it came (a busy machine merges a few)
        assert upstream.Stream.piping == others  # counted while piped, not after close
    run(test())


def test_a_pipe_begun_after_the_reader_fell_behind_reads_on() -> None:
    """Over HIGH bytes came before the pipe began (reading paused): the pipe takes them and
    reading resumes, to the end."""
    big = b"x" * (upstream.HIGH * 3)
    parts = [HEAD + b"transfer-encoding: chunked\r\n\r\n", b"1\r\na\r\n",
             b"%x\r\n%s\r\n" % (len(big), big), b"1\r\nz\r\n0\r\n\r\n"]

    async def test() -> None:
        server, port = await _serve(parts, pause=0.02)
        async with server:
            stream = await _open(port)
            await stream.head()
            assert await stream.read() == b"a"
            await asyncio.sleep(0.2)  # the big piece arrives, nobody takes it: paused
            sink = Sink()
            stream.pipe(sink, [])
            assert await asyncio.wait_for(stream.piped(), 5) is True
            payload = b"".join(w.split(b"\r\n", 1)[1][:-2] for w in sink.written)
            assert payload == big + b"z"  # all of it, in order
            stream.close()
    run(test())
