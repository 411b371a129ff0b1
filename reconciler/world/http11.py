"""HTTP/1.1 framing of one request and its response (PURE: sans-IO).

A ``Conversation`` is one request on a connection of its own: ``request()``
gives the bytes to write (always with ``Connection: close``), ``receive()`` is
fed what the socket read (``b""`` at end of stream) and returns the ``Reply``
once the response is complete. No socket, clock or loop here: ``probe.py``
does the IO. A reader that streams the body (the router's ``upstream.py``)
reads ``head`` and ``length`` once the head is in, and ``take()``s the body
bytes as they arrive.

Only what a probe needs, strictly (RFC 9112): a status line and headers (at
most 64 KiB, no obsolete line folding), interim 1xx answers skipped, and a body
framed by ``Content-Length``, by ``Transfer-Encoding: chunked`` (trailers
read and dropped) or by the end of the stream. The body cap is enforced while
receiving: a declared ``Content-Length`` over it, or more body bytes than it,
raise ``TooLarge`` before anything past the cap is kept. Anything else that is
not HTTP/1.1 — a bad status line, a malformed length, an unknown transfer
coding, a peer that closes early — raises
``ProtocolError``.

Why not h11 (round 1 used it): observing 200 servers is mostly client CPU per
request, and h11's general state machine (both roles, keep-alive, every event
validated twice) was a third of it; this reads one response and stops.
``tests/observe/test_http11.py`` checks it against h11 on generated answers.
"""

from __future__ import annotations

import re
from typing import Iterable

import attrs

_DROPPED = {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding"}
MAX_HEAD = 64 * 1024  # status line + headers
_MAX_LINE = 4096  # one chunk-size line or trailer line
# The grammar of RFC 9110/9112 as h11 reads it (lenient where h11 is: bare LF
# line ends, obs-text and control characters other than NUL in field values).
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_STATUS = re.compile(rb"HTTP/[0-9]\.[0-9] ([0-9]{3})(?: (?:[ \t]|[^\x00\s])*)?")
_VALUE = re.compile(rb"[^\x00\s]+(?:[ \t]+[^\x00\s]+)*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*")
_BLANK_LINE = re.compile(rb"\n\r?\n")
_OUTGOING_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")


class TooLarge(Exception):
    """The response body is (or says it is) over the cap."""


class ProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 response (or it closed before one ended)."""


@attrs.frozen(kw_only=True)
class Reply:
    """A complete response: status, headers (lower-case names) and body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class Conversation:
    """One request/response pair on its own connection (stateful, sans-IO)."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._buffer = b""
        self._head: tuple[int, tuple[tuple[bytes, bytes], ...]] | None = None
        self._framing = ""  # "length" | "chunked" | "close", once the head is read
        self._left = 0  # length: body bytes still due; chunked: bytes of this chunk
        self._chunks: list[bytes] = []
        self._size = 0
        self._crlf_due = False  # chunked: a chunk's data was read, its CRLF is next
        self._trailers = False  # chunked: the last chunk was read, trailers follow
        self._reply: Reply | None = None
        self.length: int | None = None  # the declared body length, once the head is read

    @property
    def head(self) -> tuple[int, tuple[tuple[bytes, bytes], ...]] | None:
        """The final status and headers (lower-case names), once read."""
        return self._head

    @property
    def complete(self) -> bool:
        return self._reply is not None

    def take(self) -> bytes:
        """The body bytes received and not taken yet (a streaming reader's share)."""
        chunks, self._chunks = self._chunks, []
        return b"".join(chunks)

    def request(
        self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """The request's bytes; hop-by-hop headers replaced by ``Connection: close``."""
        if not _TOKEN.fullmatch(method.encode("ascii")) or not re.fullmatch(rb"[!-~]+", target):
            raise ValueError(f"not a request line: {method} {target!r}")
        lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
        sized = False
        for name, value in headers:
            lower = name.lower()
            if lower in _DROPPED:
                continue
            if not _TOKEN.fullmatch(name) or not _OUTGOING_VALUE.fullmatch(value):
                raise ValueError(f"not a header: {name!r}: {value!r}")
            sized = sized or lower == b"content-length"
            lines.append(name + b": " + value)
        if body and not sized:
            lines.append(b"Content-Length: %d" % len(body))
        lines.append(b"Connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    def receive(self, data: bytes) -> Reply | None:
        """Feed bytes read (``b""`` = the peer closed); the Reply once complete."""
        if self._reply is not None:
            return self._reply  # anything after the response is not ours to read
        if not data:
            return self._closed()
        self._buffer += data
        while self._head is None:
            if not self._read_head():
                return None
        if self._framing == "length":
            self._take(min(self._left, len(self._buffer)))
            if self._left == 0:
                return self._done()
        elif self._framing == "chunked":
            return self._read_chunks()
        else:  # until the peer closes
            self._take(len(self._buffer))
        return None

    # ---------------------------------------------------------------- head

    def _read_head(self) -> bool:
        """Parse one head if it is complete (interim 1xx heads are dropped)."""
        lines = self._lines(MAX_HEAD)
        if lines is None:
            if self._buffer and not b"HTTP/".startswith(self._buffer[:5]):
                raise ProtocolError("not an HTTP response")
            return False
        matched = _STATUS.fullmatch(lines[0]) if lines else None
        if matched is None:
            raise ProtocolError(f"not an HTTP status line: {(lines or [b''])[0][:80]!r}")
        status = int(matched.group(1))
        if status < 100:
            raise ProtocolError(f"status {status} is not an HTTP status")
        headers = tuple(_field(line) for line in lines[1:])
        if status == 101:
            raise ProtocolError("101 Switching Protocols: nothing was asked to switch")
        if status < 200:
            return True  # interim answer (100 Continue, 103 Early Hints): the real one follows
        self._head = (status, headers)
        self._framing, self._left = _framing(status, headers, self._cap)
        self.length = self._left if self._framing == "length" else None
        return True

    def _lines(self, limit: int) -> list[bytes] | None:
        """Lines up to a blank one (a head, or trailers), taken from the buffer; None: not yet."""
        if self._buffer[:2] == b"\r\n":
            self._buffer = self._buffer[2:]
            return []
        blank = _BLANK_LINE.search(self._buffer)
        if blank is None or blank.start() > limit:
            if len(self._buffer) > limit:
                raise ProtocolError(f"response head or trailers over {limit} bytes")
            return None
        block, self._buffer = self._buffer[:blank.start()], self._buffer[blank.end():]
        return [line[:-1] if line.endswith(b"\r") else line for line in block.split(b"\n")]

    # ---------------------------------------------------------------- body

    def _take(self, count: int) -> None:
        if count:
            if self._size + count > self._cap:
                raise TooLarge(f"more than {self._cap} bytes")
            self._chunks.append(self._buffer[:count])
            self._buffer = self._buffer[count:]
            self._size += count
            if self._framing != "close":
                self._left -= count

    def _read_chunks(self) -> Reply | None:
        while True:
            if self._left > 0:  # inside a chunk's data
                self._take(min(self._left, len(self._buffer)))
                if self._left:
                    return None
                self._crlf_due = True
            if self._crlf_due:
                if len(self._buffer) < 2:
                    return None
                if self._buffer[:2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                self._buffer, self._crlf_due = self._buffer[2:], False
            if self._trailers:
                trailers = self._lines(MAX_HEAD)
                if trailers is None:
                    return None
                for line in trailers:
                    _field(line)  # checked, dropped
                return self._done()
            line = self._line()
            if line is None:
                return None
            matched = _CHUNK_SIZE.fullmatch(line)
            if matched is None:
                raise ProtocolError(f"bad chunk size line {line[:40]!r}")
            size = int(matched.group(1), 16)
            if size == 0:
                self._trailers = True
            elif self._size + size > self._cap:
                raise TooLarge(f"more than {self._cap} bytes")
            else:
                self._left = size

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_LINE:
                raise ProtocolError("chunk or trailer line too long")
            return None
        line, self._buffer = self._buffer[:end], self._buffer[end + 2:]
        return line

    def _closed(self) -> Reply | None:
        if self._head is not None and self._framing == "close":
            return self._done()
        if self._head is None:
            raise ProtocolError("server closed the connection without answering")
        raise ProtocolError("server closed the connection before the body ended")

    def _done(self) -> Reply:
        assert self._head is not None
        status, headers = self._head
        self._reply = Reply(status=status, headers=headers, body=b"".join(self._chunks))
        return self._reply


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, colon, value = line.partition(b":")
    if not colon or not _TOKEN.fullmatch(name):
        raise ProtocolError(f"not a header line: {line[:80]!r}")
    value = value.strip(b" \t")
    if value and not _VALUE.fullmatch(value):
        raise ProtocolError(f"control characters in header {name.decode('latin-1')}")
    return name.lower(), value


def _framing(status: int, headers: tuple[tuple[bytes, bytes], ...], cap: int) -> tuple[str, int]:
    """How the body ends (RFC 9112 §6.3): no body, a length, chunked, or the end of stream.

    The framing headers are checked on every answer, even one without a body."""
    codings = [v for k, v in headers if k == b"transfer-encoding"]
    lengths = {v for k, v in headers if k == b"content-length"}
    if codings and b",".join(codings).replace(b" ", b"").lower() != b"chunked":
        raise ProtocolError(f"unsupported Transfer-Encoding {b', '.join(codings)!r}")
    declared = None
    if lengths:
        values = {v.strip() for value in lengths for v in value.split(b",")}
        if len(values) != 1 or not next(iter(values)).isdigit() or len(next(iter(values))) > 18:
            raise ProtocolError(f"bad Content-Length {sorted(lengths)!r}")
        declared = int(next(iter(values)))
    if status in (204, 304):
        return "length", 0
    if codings:  # it overrides Content-Length (RFC 9112 §6.3)
        return "chunked", 0
    if declared is None:
        return "close", 0
    if declared > cap:
        raise TooLarge(f"declared {declared} bytes")
    return "length", declared
