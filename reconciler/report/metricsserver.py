"""The loopback-only ``/metrics`` HTTP server (SHELL; BEHAVIOUR §5, §9's guard).

``--metrics-addr`` is parsed here (``parse_addr``: an IP address on loopback, never
a name beyond ``localhost``); ``LoopbackServer`` serves any WSGI app (``metrics.py``
gives it prometheus_client's) from a daemon thread, on ``/metrics`` only, with at
most ``MAX_SCRAPES`` scrapes at once and ``SCRAPE_DEADLINE`` seconds for each.
What is served is ``metrics.py``'s: this module imports no prometheus_client.
"""

from __future__ import annotations

import socket
import socketserver
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from reconciler.core import loopback
from reconciler.report import logs


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) on loopback; ValueError says why not."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--metrics-addr {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == loopback.LOCALHOST:
        host = loopback.LOCALHOST_ADDRESS
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--metrics-addr {addr!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--metrics-addr {addr!r}: port {port} is out of range")
    if loopback.ip_of(host) is None:
        raise ValueError(f"--metrics-addr {addr!r}: {host!r} is not an IP address "
                         "(use 127.0.0.1 or [::1])")
    if not loopback.is_loopback_host(host):
        raise ValueError(f"--metrics-addr {addr!r}: refusing a non-loopback address; "
                         "metrics are served on loopback only")
    return host, port


#: §9 the metrics endpoint's own guard: scrapes at once, and a whole scrape's time.
MAX_SCRAPES = 32
SCRAPE_DEADLINE = 10.0


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per scrape, at most ``MAX_SCRAPES`` at once (a connection beyond is
    closed at once: its thread and descriptor are the daemon's); a client's failure is
    one quiet log line per kind, never a traceback."""

    daemon_threads = True  # a stalled scrape cannot keep the daemon from exiting
    hush = logs.Hush(event="metrics")

    def __init__(self, *args, **kwargs) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.hush.say("metrics-connections", f"metrics: {MAX_SCRAPES} scrapes already "
                          "in progress; closing another connection at once")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        kind = type(sys.exc_info()[1]).__name__
        self.hush.say(f"metrics-{kind}", f"metrics: a scrape failed: {kind}")


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = 5.0  # a stalled client cannot hold a thread forever …

    def handle(self) -> None:
        # … nor a slow one: the whole scrape gets SCRAPE_DEADLINE, then its socket is shut.
        timer = threading.Timer(SCRAPE_DEADLINE, self._cut)
        timer.daemon = True
        timer.start()
        try:
            super().handle()
        finally:
            timer.cancel()

    def _cut(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # scrapes are not worth a log line


def _only_metrics(app):
    """``/metrics`` (any query) goes to the app; every other path is a 404."""
    def wsgi(environ, start_response):
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found; try /metrics\n"]
        return app(environ, start_response)
    return wsgi


class LoopbackServer:
    """The WSGI ``app`` on ``/metrics`` at a loopback address, served from a daemon thread."""

    def __init__(self, addr: str, app) -> None:
        host, port = parse_addr(addr)
        server_class = _Server6 if ":" in host else _Server
        self._server = make_server(host, port, _only_metrics(app),
                                   server_class=server_class, handler_class=_QuietHandler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
            name="reconciler-metrics", daemon=True,
        )
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
