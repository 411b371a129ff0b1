"""§2 probe hygiene against real loopback servers: redirects, allowlist, caps, timeouts, proxies."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from reconciler.world import probe
from reconciler.core.desired import (
    Desired,
    Mode,
    NodeConfig,
    PortRange,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Health, Remembered
from reconciler.world.observe import observe
from reconciler.runtimes.common import ErrorKind, ProbeRequest
from tests.observe.servers import Scripted, Silent, free_port

HEALTH = ProbeRequest(method="GET", path="/health")


def role(port: int, runtime: Runtime = Runtime.LLAMACPP, mode: Mode = Mode.ADOPTED) -> RoleSpec:
    return RoleSpec(name="r", runtime=runtime, mode=mode, serve=ServeSpec(port=port))


def one(port: int, node: NodeConfig = NodeConfig(), **kw: object):  # type: ignore[no-untyped-def]
    desired = Desired(roles=(role(port, **kw),), node=node)  # type: ignore[arg-type]
    return observe(desired, Remembered(), probe_timeout=0.5).roles[0]


def test_redirect_is_not_followed() -> None:
    """A /health 302 is reported as such; its target receives nothing."""
    with Scripted({"/health": (200, {"status": "ok"})}) as target:
        location = f"http://127.0.0.1:{target.port}/health"
        with Scripted({"/health": (302, b"", {"Location": location})}) as server:
            obs = one(server.port)
        assert target.connections == 0
    assert obs.probe.health is Health.UNHEALTHY
    assert "302 (redirects are not followed)" in obs.probe.detail


@pytest.mark.parametrize("runtime", list(Runtime))
@pytest.mark.parametrize("mode", list(Mode))
def test_port_outside_allowlist_gets_no_packet(runtime: Runtime, mode: Mode) -> None:
    """Outside allowed_ports: NOT_PROBED and zero connections (no probe, no port_taken connect)."""
    with Silent() as listener:
        port = listener.port
        allowed = PortRange(start=port + 1, end=port + 10)
        obs = one(port, NodeConfig(allowed_ports=allowed), runtime=runtime, mode=mode)
        assert listener.accepted() == 0
    assert obs.probe.health is Health.NOT_PROBED
    assert f"port {port} is outside allowed_ports" in obs.probe.detail
    assert obs.port_taken is False


def test_inside_allowlist_is_probed() -> None:
    """The twin: the same listener inside the range does receive the probe."""
    with Silent() as listener:
        port = listener.port
        obs = one(port, NodeConfig(allowed_ports=PortRange(start=port, end=port)))
        assert listener.accepted() >= 1
    assert obs.probe.health is Health.UNREACHABLE


def _raw_server(response_head: bytes, chunks: list[bytes], gap: float = 0.0) -> tuple[int, threading.Thread]:
    """Answer one connection with a head and then chunks (optionally dripped)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)

    def serve() -> None:
        conn, _ = sock.accept()
        try:
            conn.recv(65536)
            conn.sendall(response_head)
            for chunk in chunks:
                conn.sendall(chunk)
                if gap:
                    time.sleep(gap)
        except OSError:
            pass
        finally:
            conn.close()
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return sock.getsockname()[1], thread


def _chunked(data: bytes, size: int = 65536) -> list[bytes]:
    out = [b"%x\r\n%s\r\n" % (len(data[i:i + size]), data[i:i + size]) for i in range(0, len(data), size)]
    return out + [b"0\r\n\r\n"]


def test_oversized_declared_body_is_transport_error() -> None:
    """A body declared over 1 MiB is a too-large transport error → unreachable."""
    big = b"x" * (2 * 1024 * 1024)
    with Scripted({"/health": (200, big)}) as server:
        answer = probe.send_sync("127.0.0.1", server.port, HEALTH, timeout=2)
        obs = one(server.port)
    assert answer.error is ErrorKind.TOO_LARGE and answer.status is None
    assert obs.probe.health is Health.UNREACHABLE
    assert "larger than 1 MiB" in obs.probe.detail


def test_oversized_chunked_body_is_cut_off() -> None:
    """Without a Content-Length, the streamed body is cut at 1 MiB too."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    port, thread = _raw_server(head, _chunked(b"y" * (1024 * 1024 + 10)))
    answer = probe.send_sync("127.0.0.1", port, HEALTH, timeout=2)
    thread.join(timeout=5)
    assert answer.error is ErrorKind.TOO_LARGE


def test_body_just_under_the_cap_is_read() -> None:
    """The twin: a chunked body of exactly 1 MiB is an ordinary answer."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    port, thread = _raw_server(head, _chunked(b"z" * (1024 * 1024)))
    answer = probe.send_sync("127.0.0.1", port, HEALTH, timeout=2)
    thread.join(timeout=5)
    assert answer.status == 200 and answer.error is None


def test_silent_server_times_out_not_hangs() -> None:
    """A server that accepts and never answers is unreachable after the timeout."""
    with Silent() as listener:
        started = time.monotonic()
        obs = one(listener.port)
        took = time.monotonic() - started
    assert obs.probe.health is Health.UNREACHABLE
    assert obs.probe.detail == "no answer to GET /health within 0.5s"
    assert took < 2.0


def test_dripping_server_hits_the_total_timeout() -> None:
    """A byte every 100 ms never trips a per-read timeout; the total timeout still ends it."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
    port, thread = _raw_server(head, [b"a"] * 100, gap=0.1)
    started = time.monotonic()
    answer = probe.send_sync("127.0.0.1", port, HEALTH, timeout=0.5)
    assert answer.error is ErrorKind.TIMEOUT
    assert time.monotonic() - started < 1.5
    thread.join(timeout=15)


def test_refused_is_a_value() -> None:
    """Nothing listening → a REFUSED answer, not an exception."""
    answer = probe.send_sync("127.0.0.1", free_port(), HEALTH, timeout=1)
    assert answer.error is ErrorKind.REFUSED and answer.latency is not None


@pytest.mark.parametrize("var", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
def test_proxy_environment_is_ignored(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the environment receives nothing; the probe goes straight to the server."""
    with Silent() as proxy, Scripted({"/health": (200, {"status": "ok"})}) as server:
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setenv(var, f"http://127.0.0.1:{proxy.port}")
        answer = probe.send_sync("127.0.0.1", server.port, HEALTH, timeout=1)
        assert proxy.accepted() == 0
    assert answer.status == 200
    assert server.paths() == [("GET", "/health")]


def test_every_request_opens_its_own_connection() -> None:
    """No connection reuse: three requests of one exchange → three connections."""
    routes = {
        "/health": (200, {"status": "ok"}),
        "/v1/models": (200, {"data": [{"id": "r"}]}),
        "/props": (200, {"model_path": "/m/r.gguf"}),
    }
    with Scripted(routes) as server:
        obs = one(server.port)
        assert server.connections == 3
    assert obs.probe.health is Health.UP
