"""Real loopback HTTP servers that serve Model files, for the fetch tests (§1.6).

* ``nginx(root, tmp)``: Debian's nginx serving a directory (real ``Range``
  support, ``sendfile``), started from a config in ``tmp`` on a free loopback
  port, as root with ``user root`` so that it reads pytest's 0700 directories.
* ``FaultServer``: a standard-library server in a thread that serves named
  files with ``Range`` and can misbehave for real: drop the connection after
  some bytes, send other bytes, send more than the file, redirect (to http, to
  itself in a loop, to a "CDN" on another loopback address), answer a range
  from another byte than asked (``range_shift``), and count the bytes it really wrote.
* ``FaultServer`` is also the **Hub double**: ``GET|HEAD /ORG/REPO/resolve/REV/PATH``
  answers as huggingface.co does for an LFS file (huggingface_hub 2.4's
  ``file_download.get_hf_file_metadata`` and ``utils/_http.py`` read these):
  a 302 whose ``Location`` is a CDN URL on another host, carrying
  ``X-Repo-Commit`` (the commit a branch resolves to), ``X-Linked-Etag``
  (``"<sha256>"``, the LFS object id), ``X-Linked-Size`` and ``ETag`` (the
  git blob id). Not verified against the live Hub (no network here): the
  exact ``ETag`` of the redirect, ``Content-Length`` on a HEAD of the
  redirect, and whether a branch name in the URL is echoed anywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
#: Skip the nginx tests where nginx is missing, except in CI (.ci/run installs it: a
#: missing nginx there is a broken build, and the tests fail loudly).
NO_NGINX = not os.path.exists(NGINX) and not os.environ.get("CI")
NO_NGINX_WHY = "Debian's nginx is not installed (.ci/run installs it): apt-get install nginx"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Nginx:
    """``limit_rate`` bounds each answer's rate (``0``: none); ``range_rate``, where given,
    bounds the answers to a ``Range`` from a byte > 0 instead (a resumed fetch at full speed). The
    access log (``tmp/access.log``) has one line per request: ``METHOD URI range=RANGE STATUS
    BYTES_SENT`` (``range=-`` without one), see ``log()``."""

    def __init__(self, root: Path, tmp: Path, limit_rate: str = "0",
                 range_rate: str | None = None) -> None:
        self.port = free_port()
        self.tmp = tmp
        rate = "$rate" if range_rate is not None else limit_rate
        tmp.mkdir(parents=True, exist_ok=True)
        conf = tmp / "nginx.conf"
        conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 64; }}
http {{
  log_format ranged '$request_method $uri range=$http_range $status $body_bytes_sent';
  access_log {tmp}/access.log ranged;
  map $http_range $rate {{ "" {limit_rate}; "bytes=0-" {limit_rate}; default {range_rate or 0}; }}
  sendfile on;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{self.port}; root {root}; limit_rate {rate}; }}
}}
""")
        self.proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode()}")
                time.sleep(0.05)
        raise RuntimeError("nginx did not listen")

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def log(self) -> list[tuple[str, str, str, int, int]]:
        """The requests logged so far: (method, uri, Range header or '', status, bytes sent)."""
        path = self.tmp / "access.log"
        rows = []
        for line in (path.read_text().splitlines() if path.exists() else []):
            method, uri, rng, status, sent = line.split(" ")
            rng = rng.removeprefix("range=")
            rows.append((method, uri, "" if rng == "-" else rng, int(status), int(sent)))
        return rows

    def close(self) -> None:
        """Stop nginx gracefully (SIGQUIT: it finishes and logs the requests it has, so the
        access log is whole once this returns; a SIGKILL lost a 416's line that nginx writes
        after the client already has the answer); killed if it takes over 5 s."""
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


class FaultServer:
    """Serves ``files[name] = bytes`` at ``/name``; ``faults[name]`` makes it misbehave."""

    def __init__(self, host: str = "127.0.0.1", tls: tuple[str, str] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, dict] = {}
        self.sent = 0  # body bytes written, all requests
        self.requests: list[tuple[str, str, dict]] = []  # (method, path, headers)
        self.hub: dict[str, tuple[str, str]] = {}  # "ORG/REPO" → (commit, CDN base URL)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                outer.requests.append((self.command, self.path, dict(self.headers)))
                if "/resolve/" in self.path:
                    return self._resolve()
                name = self.path.lstrip("/")
                fault = outer.faults.get(name, {})
                if "redirect" in fault:
                    self.send_response(302)
                    self.send_header("Location", fault["redirect"])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = outer.files.get(name)
                if data is None:
                    self.send_error(404)
                    return
                if "wrong" in fault:
                    data = bytes(b ^ 0xFF for b in data)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and not fault.get("ignore_range"):
                    start = int(rng[6:].split("-")[0])
                start = max(0, start + fault.get("range_shift", 0)) if start else 0
                declared = len(data) + fault.get("extra", 0)
                if start:
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{declared - 1}/{declared}")
                else:
                    self.send_response(200)
                if not fault.get("no_length"):
                    self.send_header("Content-Length", str(declared - start))
                self.send_header("Connection", "close")
                self.end_headers()
                if not body:
                    return
                payload = data[start:] + b"\0" * fault.get("extra", 0)
                drop = fault.pop("drop_at", None)  # once: the next request is served whole
                if drop is not None:
                    payload = payload[:max(0, drop - start)]
                for i in range(0, len(payload), 1 << 16):
                    piece = payload[i:i + (1 << 16)]
                    self.wfile.write(piece)
                    outer.sent += len(piece)
                    if fault.get("delay"):
                        time.sleep(fault["delay"])
                self.wfile.flush()
                if drop is not None:
                    self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

            def _resolve(self) -> None:
                repo, _, rest = self.path.lstrip("/").partition("/resolve/")
                rev, _, path = rest.partition("/")
                known = outer.hub.get(repo)
                data = outer.files.get(path)
                if known is None or data is None or rev not in (known[0], "main"):
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                commit, cdn = known
                self.send_response(302)
                self.send_header("Location", f"{cdn}/{path}")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:  # (certfile, keyfile): https on loopback
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.base = f"{'https' if tls else 'http'}://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def self_signed(where: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command (.ci/run has it)."""
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)
