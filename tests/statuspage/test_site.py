"""The page's answers (report/statussite.py) and its own server (report/statusserver.py), in-process."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time

import pytest

from reconciler.report import page
from reconciler.report.snapshot import Snapshot
from reconciler.report.statusserver import StatusServer
from reconciler.report.statussite import Site, authorized, key_check, sse_event
from tests.statuspage.test_page import _snapshot


def _run(coro):
    return asyncio.run(coro)


def test_the_key_bearer_or_basic() -> None:
    """§11 the page's key: no key means open; with one, a Bearer token or Basic password equal to it
    passes, anything else (absent, blank, wrong, malformed) does not."""
    basic = "Basic " + base64.b64encode(b"anyone:k3y").decode()
    ok = key_check("k3y")
    assert authorized(None, None) and key_check(None) is None
    assert authorized(ok, "Bearer k3y") and authorized(ok, basic)
    for bad in (None, "", "Bearer", "Bearer nope", "Basic !!!", "Token k3y",
                "Basic " + base64.b64encode(b"k3y").decode()):
        assert not authorized(ok, bad), bad


def test_answers_carry_the_csp_and_nosniff_and_refuse_writes() -> None:
    """§11 every answer carries the page's CSP and ``nosniff``; the page shows the roles; a write
    method is 405."""
    site = Site()
    site.publish(_snapshot())
    got = _run(site.answer("GET", "/", "", None))
    headers = dict(got.headers)
    assert got.status == 200 and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"] == page.csp()
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b'data-role="coder"' in got.body
    assert _run(site.answer("POST", "/", "", None)).status == 405
    assert _run(site.answer("GET", "/nope", "", None)).status == 404
    denied = _run(site.answer("GET", "/", "", None, key_ok=key_check("k")))
    assert denied.status == 401 and ("WWW-Authenticate", 'Basic realm="reconciler"') in denied.headers
    js = _run(site.answer("GET", "/status/page.js", "", "Bearer k", key_ok=key_check("k")))
    assert js.status == 200 and js.body.decode() == page.SCRIPT
    filtered = _run(site.answer("GET", "/", "role=coder", None)).body.decode()
    assert '<tr class="event" data-role="coder">' in filtered and "event failed" not in filtered


def test_a_publish_is_pushed_to_an_open_stream_at_once() -> None:
    """§11 a pass published is pushed at once to an open server-sent-events stream (no polling)."""
    site = Site()
    site.publish(_snapshot())

    async def main():
        got = await site.answer("GET", "/status/stream", "", None)
        stream = got.chunks
        assert await stream.__anext__() == b"retry: 2000\n\n"
        assert await stream.__anext__() == sse_event("pass", "1")
        waiting = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # nothing is sent until the daemon publishes
        started = time.monotonic()
        threading.Thread(target=site.publish, args=(_snapshot(),)).start()
        assert await asyncio.wait_for(waiting, 2) == sse_event("pass", "2")
        await stream.aclose()
        return time.monotonic() - started

    assert _run(main()) < 1.0


def test_a_log_streams_its_last_lines_then_what_is_appended(tmp_path) -> None:
    """§11 a role's log streams its last lines, then what is appended, as text events (markup stays
    text)."""
    (tmp_path / "server.log").write_text("one\n<script>two</script>\n")
    site = Site()
    site.publish(Snapshot(), {"chat": str(tmp_path)})

    async def main():
        got = await site.answer("GET", "/status/logs", "role=chat", None)
        stream = got.chunks
        seen = [await stream.__anext__() for _ in range(3)]
        with open(tmp_path / "server.log", "a") as f:
            f.write("three\n")
        seen.append(await asyncio.wait_for(stream.__anext__(), 3))
        await stream.aclose()
        return seen

    note, one, two, three = _run(main())
    assert note.startswith(b"event: note\n")
    assert (one, two, three) == (sse_event("line", "one"), sse_event("line", "<script>two</script>"),
                                 sse_event("line", "three"))
    assert _run(site.answer("GET", "/status/logs", "role=other", None)).status == 404


def _get(port: int, path: str, auth: str | None = None) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        extra = f"Authorization: {auth}\r\n" if auth else ""
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_its_own_server_on_loopback() -> None:
    """§11 ``status_page.listen``: its own server answers on loopback, 401 without the key, the page
    with it."""
    site = Site()
    site.publish(_snapshot())
    server = StatusServer("127.0.0.1", 0, site, key="k")
    server.start()
    try:
        host, port = server.address
        assert host == "127.0.0.1"
        assert _get(port, "/").startswith(b"HTTP/1.1 401 ")
        answer = _get(port, "/", "Bearer k")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"X-Content-Type-Options: nosniff" in head
        assert f"Content-Length: {len(body)}".encode() in head
        assert b'data-role="coder"' in body
    finally:
        server.close()


def test_a_port_in_use_is_a_start_error() -> None:
    """§11 a status port already in use is an error when the server starts, not a silent failure
    later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        server = StatusServer("127.0.0.1", s.getsockname()[1], Site())
        with pytest.raises(OSError):
            server.start()


def test_end_streams_ends_the_open_streams(tmp_path) -> None:
    """The daemon stops: a page's stream and a followed log end, so the server closes at once."""
    (tmp_path / "server.log").write_text("")
    site = Site()
    site.publish(Snapshot(), {"chat": str(tmp_path)})

    async def main():
        passes = (await site.answer("GET", "/status/stream", "", None)).chunks
        log = (await site.answer("GET", "/status/logs", "role=chat", None)).chunks
        await passes.__anext__(), await passes.__anext__(), await log.__anext__()
        waiting = [asyncio.ensure_future(passes.__anext__()), asyncio.ensure_future(log.__anext__())]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)
        threading.Thread(target=site.end_streams).start()
        for w in waiting:
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(w, 2)

    _run(main())


def test_the_page_on_the_routers_port_with_its_key(tmp_path) -> None:
    """GET / on the router: the router's api_key_file applies; /v1 routes are untouched."""
    from reconciler.core.desired import RouterConfig
    from reconciler.router.service import Router

    key = tmp_path / "key"
    key.write_text("r0uter\n")
    site = Site()
    site.publish(_snapshot())
    router = Router(RouterConfig(host="127.0.0.1", port=0, api_key_file=str(key)),
                    wake=lambda: None, status=site)
    router.start()
    try:
        port = router.address[1]
        assert _get(port, "/").startswith(b"HTTP/1.1 401 ")
        assert _get(port, "/", "Bearer nope").startswith(b"HTTP/1.1 401 ")
        basic = "Basic " + base64.b64encode(b"me:r0uter").decode()
        for auth in ("Bearer r0uter", basic):
            head, _, body = _get(port, "/", auth).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert b"Content-Security-Policy: default-src 'none'" in head
            assert b'data-role="coder"' in body
        assert _get(port, "/status/page.js", "Bearer r0uter").startswith(b"HTTP/1.1 200 ")
        assert _get(port, "/status/nope", "Bearer r0uter").startswith(b"HTTP/1.1 404 ")
        assert b'"object"' in _get(port, "/v1/models", "Bearer r0uter")
    finally:
        router.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "localhost.example"])
def test_its_own_server_never_binds_beyond_loopback(host: str) -> None:
    """§5/§11 the status page's own server refuses any address beyond loopback before binding."""
    with pytest.raises(ValueError, match="not a loopback address"):
        StatusServer(host, 0, Site()).start()
