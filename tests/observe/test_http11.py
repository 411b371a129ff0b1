"""HTTP/1.1 framing of one probe (http11.Conversation, no sockets) and the headers a probe sends."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler import http11, probe
from reconciler.runtimes.common import ProbeRequest
from tests.observe.servers import Scripted

CAP = 1000
BODY = b'{"status":"ok"}'
PLAIN = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def talk(method: str = "GET", body: bytes = b"") -> tuple[http11.Conversation, bytes]:
    conv = http11.Conversation(CAP)
    out = conv.request(method, b"/health", [(b"Host", b"127.0.0.1:1"),
                                           (b"Connection", b"keep-alive")], body)
    return conv, out


def chunked(data: bytes, size: int) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(data[i:i + size]), data[i:i + size])
             for i in range(0, len(data), size)]
    return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(parts) + b"0\r\n\r\n")


def feed(conv: http11.Conversation, data: bytes, cuts: list[int]) -> http11.Reply | None:
    reply = None
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for start, end in zip(bounds, bounds[1:]):
        if end > start:
            reply = conv.receive(data[start:end])
    return reply


def test_request_says_connection_close_and_drops_keep_alive() -> None:
    """The request asks the server to close; a caller's keep-alive is not sent."""
    _, out = talk()
    head = out.lower()
    assert head.startswith(b"get /health http/1.1\r\n")
    assert b"connection: close\r\n" in head and b"keep-alive" not in head


def test_request_body_gets_a_content_length() -> None:
    """A POST body is framed by Content-Length, never chunked."""
    _, out = talk("POST", b'{"a":1}')
    assert b"content-length: 7\r\n" in out.lower() and out.endswith(b'\r\n\r\n{"a":1}')
    assert b"transfer-encoding" not in out.lower()


@given(cuts=st.lists(st.integers(min_value=0), max_size=6))
def test_reply_is_the_same_however_the_bytes_arrive(cuts: list[int]) -> None:
    """Content-Length and chunked answers, split anywhere, give one complete Reply."""
    for raw in (PLAIN, chunked(BODY, 4)):
        conv, _ = talk()
        reply = feed(conv, raw, cuts)
        assert reply is not None and reply.status == 200 and reply.body == BODY


def test_answer_until_close_needs_the_end_of_stream() -> None:
    """Without a length the body ends when the peer closes (b"" fed)."""
    conv, _ = talk()
    assert conv.receive(b"HTTP/1.0 200 OK\r\n\r\nhello") is None
    reply = conv.receive(b"")
    assert reply is not None and reply.body == b"hello"


def test_redirect_is_just_an_answer() -> None:
    """A 302 comes back as a 302 with its Location; nothing is followed here."""
    conv, _ = talk()
    reply = conv.receive(b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n")
    assert reply is not None and reply.status == 302
    assert (b"location", b"/x") in reply.headers


def test_informational_answer_is_skipped() -> None:
    """A 100 Continue before the answer does not end the exchange."""
    conv, _ = talk()
    reply = conv.receive(b"HTTP/1.1 100 Continue\r\n\r\n" + PLAIN)
    assert reply is not None and reply.status == 200


def test_declared_length_over_the_cap_stops_at_the_head() -> None:
    """Content-Length over the cap raises before any body byte is taken."""
    conv, _ = talk()
    with pytest.raises(http11.TooLarge):
        conv.receive(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (CAP + 1))


@pytest.mark.parametrize(("size", "too_large"), [(CAP, False), (CAP + 1, True)])
def test_chunked_body_is_capped_while_read(size: int, too_large: bool) -> None:
    """A chunked body of exactly the cap is read; one byte more raises TooLarge."""
    conv, _ = talk()
    if too_large:
        with pytest.raises(http11.TooLarge):
            conv.receive(chunked(b"x" * size, 100))
    else:
        reply = conv.receive(chunked(b"x" * size, 100))
        assert reply is not None and len(reply.body) == size


@pytest.mark.parametrize("raw", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"])
def test_peer_closing_early_is_a_protocol_error(raw: bytes) -> None:
    """Closed before an answer, or mid-body: a protocol error, not a short Reply."""
    conv, _ = talk()
    with pytest.raises(h11.RemoteProtocolError):
        conv.receive(raw)
        conv.receive(b"")


def test_garbage_is_a_protocol_error() -> None:
    """Bytes that are not HTTP raise instead of producing an answer."""
    conv, _ = talk()
    with pytest.raises(h11.RemoteProtocolError):
        conv.receive(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


def test_probe_sends_close_identity_and_its_name() -> None:
    """On the wire: Connection: close, no compression, our User-Agent, a JSON POST body."""
    with Scripted({"/x": (200, {"ok": True})}) as server:
        probe.send_sync("127.0.0.1", server.port, ProbeRequest(method="GET", path="/x"), timeout=2)
        probe.post_json("127.0.0.1", server.port, "/x", {"a": [1]}, timeout=2)
        (m1, _, b1, h1), (m2, _, b2, h2) = server.requests
    for headers in (h1, h2):
        assert headers["Connection"] == "close"
        assert headers["Accept-Encoding"] == "identity"
        assert headers["User-Agent"] == "reconciler-probe"
        assert headers["Host"] == f"127.0.0.1:{server.port}"
    assert (m1, b1) == ("GET", None) and (m2, b2) == ("POST", {"a": [1]})
    assert h2["Content-Type"] == "application/json"
