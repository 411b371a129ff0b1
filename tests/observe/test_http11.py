"""HTTP/1.1 framing of one probe (http11.Conversation, no sockets) and the headers a probe sends."""

from __future__ import annotations

import time

import h11  # the oracle: the framing is checked against it
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.world import http11, probe
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
    with pytest.raises(http11.ProtocolError):
        conv.receive(raw)
        conv.receive(b"")


def test_garbage_is_a_protocol_error() -> None:
    """Bytes that are not HTTP raise instead of producing an answer."""
    conv, _ = talk()
    with pytest.raises(http11.ProtocolError):
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


# ---------------------------------------------------------------- against h11, the oracle

FRAMINGS = ["length", "chunked", "close", "bad-length", "two-lengths", "same-lengths",
            "te-and-length", "te-gzip"]


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """Generated answers: every framing (valid or not), interim 1xx, extra headers, cut short."""
    status = draw(st.sampled_from([200, 204, 302, 304, 404, 503]))
    body = draw(st.binary(max_size=120))
    framing = draw(st.sampled_from(FRAMINGS))
    head = [b"HTTP/1.%d %d Whatever" % (draw(st.integers(0, 1)), status)]
    head += draw(st.lists(st.sampled_from([b"Server: x", b"X-A:  b c ", b"Content-Type: a/b",
                                           b"Date:"]), max_size=3))
    payload = body
    if framing in ("length", "te-and-length"):
        head.append(b"Content-Length: %d" % len(body))
    if framing == "bad-length":
        head.append(b"Content-Length: " + draw(st.sampled_from([b"abc", b"-1", b"+3", b"1 2"])))
    if framing == "two-lengths":
        head += [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 1)]
    if framing == "same-lengths":
        head += [b"Content-Length: %d" % len(body)] * 2
    if framing in ("chunked", "te-and-length", "te-gzip"):
        head.append(b"Transfer-Encoding: " + (b"gzip" if framing == "te-gzip" else b"chunked"))
        size = draw(st.integers(1, 50))
        ext = draw(st.sampled_from([b"", b";x=1"]))
        payload = b"".join(b"%x%s\r\n%s\r\n" % (len(body[i:i + size]), ext, body[i:i + size])
                           for i in range(0, len(body), size))
        payload += b"0\r\n" + draw(st.sampled_from([b"", b"Trailer-A: 1\r\n"])) + b"\r\n"
    interim = draw(st.sampled_from([b"", b"HTTP/1.1 100 Continue\r\n\r\n"]))
    raw = interim + b"\r\n".join(head) + b"\r\n\r\n" + payload
    if draw(st.integers(0, 5)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # the peer closes early
    return raw


def ours(raw: bytes, cuts: list[int]) -> tuple[int, bytes] | str:
    conv, _ = talk()
    bounds = [0, *sorted(c % (len(raw) + 1) for c in cuts), len(raw)]
    try:
        for start, end in zip(bounds, bounds[1:]):
            if end > start and (reply := conv.receive(raw[start:end])) is not None:
                return reply.status, reply.body
        reply = conv.receive(b"")
    except (http11.ProtocolError, http11.TooLarge):
        return "error"
    assert reply is not None
    return reply.status, reply.body


def oracle(raw: bytes) -> tuple[int, bytes] | str:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/x", headers=[("Host", "a")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")
    status, chunks = None, []
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert status is not None
                return status, b"".join(chunks)
            elif event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return "error"
    except h11.RemoteProtocolError:
        return "error"


@given(raw=responses(), cuts=st.lists(st.integers(min_value=0), max_size=5),
       flip=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(0, 255))))
def test_framing_agrees_with_h11(raw: bytes, cuts: list[int], flip: tuple[int, int] | None) -> None:
    """Complete, cut-short, malformed and byte-flipped answers give what h11 gives: the
    same reply, or an error, however the bytes arrive."""
    if flip is not None and raw:
        at = flip[0] % len(raw)
        raw = raw[:at] + bytes([flip[1]]) + raw[at + 1:]
    assert ours(raw, cuts) == oracle(raw)


def _time_wait_ports() -> set[int]:
    """Ports of loopback sockets in TIME_WAIT (state 06), either end."""
    ports = set()
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] == "06":
                ports |= {int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)}
    return ports


def test_probes_leave_no_time_wait_sockets() -> None:
    """A probe's connection is reset once answered: no TIME_WAIT is left on either end."""
    with Scripted({"/x": (200, {"ok": True})}) as server:
        for _ in range(3):
            answer = probe.send_sync("127.0.0.1", server.port, ProbeRequest(method="GET", path="/x"),
                                     timeout=2)
            assert answer.status == 200 and answer.body == {"ok": True}
        time.sleep(0.05)  # let the server side finish its close
        assert server.port not in _time_wait_ports()
