"""The metrics endpoint against hostile clients (BEHAVIOUR §9 "No client can starve the daemon").

Idle connections beyond ``MAX_SCRAPES`` are closed at once while a scrape
is still answered; a slow client's scrape is cut at ``SCRAPE_DEADLINE``; a
client's failure is one quiet log line per kind, never a traceback.
"""

from __future__ import annotations

import socket
import time
import urllib.request

from reconciler.report import logs, metrics, metricsserver


def test_idle_and_slow_scrapers_cannot_hold_the_endpoint(monkeypatch, capsys) -> None:
    """``/metrics``: idle connections beyond the scrape cap are closed at once while a scrape is
    answered, a slow scrape is cut at the deadline, quietly."""
    said: list[tuple] = []
    monkeypatch.setattr(metricsserver, "SCRAPE_DEADLINE", 6.0)
    monkeypatch.setattr(metricsserver._QuietHandler, "timeout", 30.0)  # noqa: SLF001  the deadline cuts
    monkeypatch.setattr(metricsserver._Server, "hush", logs.Hush(  # noqa: SLF001
        emit=lambda *a, **k: said.append((a, k)), event="metrics"))
    server = metrics.MetricsServer("127.0.0.1:0", metrics.DaemonMetrics().registry)
    idle: list[socket.socket] = []
    try:
        host, port = server.address
        idle = [socket.create_connection((host, port)) for _ in range(metricsserver.MAX_SCRAPES - 1)]
        slow = idle[0]
        slow.sendall(b"GET /metr")  # never finished
        slots = server._server._slots  # noqa: SLF001
        deadline = time.monotonic() + 5
        while slots._value > 1 and time.monotonic() < deadline:  # noqa: SLF001  all accepted
            time.sleep(0.05)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{host}:{port}/metrics", timeout=5) as answer:
            assert answer.status == 200  # one slot was left: a real scrape goes through
        extra = [socket.create_connection((host, port)) for _ in range(20)]
        closed = 0
        for s in extra:  # the first takes the slot the scrape left; the rest are over the cap
            s.settimeout(2.0)
            try:
                closed += s.recv(100) == b""
            except TimeoutError:
                pass
            s.close()
        assert closed >= 15  # (a slot freed meanwhile lets one in)
        slow.settimeout(10)
        assert slow.recv(100) == b""  # cut at the deadline, not by its 30 s read timeout
        for s in idle[1:]:
            s.close()
        time.sleep(0.5)
        trickler = socket.create_connection((host, port))
        idle.append(trickler)
        began = time.monotonic()
        trickler.settimeout(0.3)
        for byte in b"GET /metrics HTTP/1.1\r\n" * 10:  # a byte per 0.3 s: never a whole head
            try:
                trickler.sendall(bytes([byte]))
                if trickler.recv(100) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        assert time.monotonic() - began < metricsserver.SCRAPE_DEADLINE + 1.5  # cut at the deadline
    finally:
        for s in idle:
            s.close()
        server.close()
    lines = [a[0] for a, _ in said]
    assert len(lines) <= 3 and len(set(lines)) == len(lines), said  # one line per kind
    assert any("scrapes already in progress" in line for line in lines), said
    assert all(not k.get("exc_info") for _, k in said)
    assert "Traceback" not in capsys.readouterr().err
