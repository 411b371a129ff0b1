"""HTTP/1.1 framing of one request and its response (PURE: sans-IO, over h11).

A ``Conversation`` is one request on a connection of its own: ``request()``
gives the bytes to write (always with ``Connection: close``), ``receive()`` is
fed what the socket read (``b""`` at end of stream) and returns the ``Reply``
once the response is complete. The body cap is enforced while receiving: a
declared ``Content-Length`` over it, or more body bytes than it, raise
``TooLarge`` before anything past the cap is kept. A response that breaks the
protocol raises ``h11.RemoteProtocolError``. No socket, clock or loop here:
``probe.py`` does the IO.
"""

from __future__ import annotations

from typing import Iterable

import attrs
import h11

_DROPPED = {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding"}


class TooLarge(Exception):
    """The response body is (or says it is) over the cap."""


@attrs.frozen(kw_only=True)
class Reply:
    """A complete response: status, headers (lower-case names) and body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class Conversation:
    """One request/response pair on its own connection (stateful, sans-IO)."""

    def __init__(self, cap: int) -> None:
        self._h11 = h11.Connection(h11.CLIENT)
        self._cap = cap
        self._head: h11.Response | None = None
        self._chunks: list[bytes] = []
        self._size = 0

    def request(
        self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """The request's bytes; hop-by-hop headers replaced by ``Connection: close``."""
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED]
        if body and not any(k.lower() == b"content-length" for k, _ in kept):
            kept.append((b"Content-Length", str(len(body)).encode()))
        kept.append((b"Connection", b"close"))
        send = self._h11.send
        data = send(h11.Request(method=method, target=target, headers=kept)) or b""
        if body:
            data += send(h11.Data(data=body)) or b""
        return data + (send(h11.EndOfMessage()) or b"")

    def receive(self, data: bytes) -> Reply | None:
        """Feed bytes read (``b""`` = the peer closed); the Reply once complete."""
        self._h11.receive_data(data)
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Response):
                self._head = event
                declared = _header(event.headers, b"content-length")
                if declared.isdigit() and int(declared) > self._cap:
                    raise TooLarge(f"declared {int(declared)} bytes")
            elif isinstance(event, h11.Data):
                self._size += len(event.data)
                if self._size > self._cap:
                    raise TooLarge(f"more than {self._cap} bytes")
                self._chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert self._head is not None  # h11 orders Response before EndOfMessage
                return Reply(
                    status=self._head.status_code,
                    headers=tuple((bytes(k), bytes(v)) for k, v in self._head.headers),
                    body=b"".join(self._chunks),
                )
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("server closed the connection without answering")
            # InformationalResponse (1xx): wait for the final response


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1").strip()
    return ""
