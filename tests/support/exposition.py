"""A node's ``/metrics`` for the rollout gate's tests (§13): a loopback HTTP server that
answers every GET with a Prometheus exposition, read anew each time.

``serve(body)`` starts one on a free loopback port (a daemon thread; ``server_address``
says which) and returns it; ``body`` is a function, so a test can change what the node
exposes between scrapes (the e2e test rewrites a file; the gate's tests serve a fixed
rendering). ``shutdown()`` and ``server_close()`` stop it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

#: The exposition's content type, as the reconciler's own ``/metrics`` sends it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve(body: Callable[[], bytes]) -> ThreadingHTTPServer:
    """A loopback server answering GET with ``body()`` (200, the exposition's content type)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            payload = body()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):  # quiet: pytest shows stderr of a failing test
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
