"""Loopback servers for the observer tests (stdlib only, a thread each).

``Scripted`` answers each path from a table and records every request and
every accepted connection. ``Silent`` listens without ever accepting, so a
connect lands in the backlog and nothing answers; ``accepted()`` tells whether
any client connected at all.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Reply = tuple[int, Any]  # (status, JSON body | bytes | None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    scripted: "Scripted"

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        with self.scripted.lock:
            self.scripted.connections += 1
        super().process_request(request, client_address)

    def handle_error(self, request, client_address):  # type: ignore[no-untyped-def]
        pass  # clients that time out close their end: expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _serve(self) -> None:
        scripted = self.server.scripted
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with scripted.lock:
            scripted.requests.append((self.command, self.path, body, dict(self.headers)))
        route = scripted.routes.get(self.path, (404, {"error": "not found"}))
        reply = route(self.command, body) if callable(route) else route
        status, payload = reply[0], reply[1]
        headers = reply[2] if len(reply) > 2 else {}
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    do_GET = do_POST = _serve


class Scripted:
    """``with Scripted({"/health": (200, {"status": "ok"})}) as s: s.port``."""

    def __init__(self, routes: dict[str, Reply | Callable[..., Reply]] | None = None) -> None:
        self.routes = dict(routes or {})
        self.requests: list[tuple[str, str, Any, dict[str, str]]] = []
        self.connections = 0
        self.lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.scripted = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def paths(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(m, p) for m, p, _, _ in self.requests]

    def __enter__(self) -> "Scripted":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Silent:
    """A listening socket that never accepts: connects succeed, nothing answers."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]

    def accepted(self) -> int:
        """How many connections are waiting in the backlog (drains them)."""
        self.sock.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    def __enter__(self) -> "Silent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
