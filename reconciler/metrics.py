"""Prometheus metrics: text exposition, an atomic file, a loopback /metrics server (SHELL).

``render()`` turns a pass (``loop.PassResult``) and the state store into the
Prometheus text format (version 0.0.4), every family with its HELP and TYPE:

====================================================  =====  ===========================
series                                                type   from
====================================================  =====  ===========================
``reconciler_role_status{role,status}``               gauge  one-hot over every status
``reconciler_role_restarts{role}``                    gauge  restart count (§4; resets)
``reconciler_reserved_bytes{role}``                   gauge  the residency ledger (§7)
``reconciler_memory_budget_bytes``                    gauge  NodeConfig (absent: none)
``reconciler_probe_latency_seconds{role}``            gauge  the pass's readiness probe
``reconciler_last_pass_timestamp_seconds``            gauge  unix time the pass began
``reconciler_last_pass_duration_seconds``             gauge
``reconciler_last_pass_success``                      gauge  1 when every action worked
                                                             (0 when the pass raised)
``reconciler_manifest_problems``                      gauge  0 when the manifests are valid
====================================================  =====  ===========================

The restart count is a gauge, not a ``_total`` counter: BEHAVIOUR §4 resets
it after ``stable_after`` and on ``reconcile start``.

``write_file()`` is for ``--once`` under cron and node_exporter's textfile
collector: written to a temporary file in the same directory, then renamed
over the target, so a scrape never reads half a file. ``MetricsServer``
serves the latest text on ``/metrics`` from a daemon thread (``watch``);
it binds loopback addresses only.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable

from reconciler.decisions import Status

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "reconciler_role_status": ("gauge", "Current status of each role (one series per status, 1 for the current one)."),
    "reconciler_role_restarts": ("gauge", "Restarts counted by the restart policy (reset after stable_after or reconcile start)."),
    "reconciler_reserved_bytes": ("gauge", "Bytes each role holds in the residency ledger."),
    "reconciler_memory_budget_bytes": ("gauge", "The NodeConfig memory budget in bytes (absent when there is none)."),
    "reconciler_probe_latency_seconds": ("gauge", "Latency of the last readiness probe of each role."),
    "reconciler_last_pass_timestamp_seconds": ("gauge", "Unix time at which the last reconcile pass began."),
    "reconciler_last_pass_duration_seconds": ("gauge", "Duration of the last reconcile pass."),
    "reconciler_last_pass_success": ("gauge", "1 if the last pass's actions all succeeded, else 0."),
    "reconciler_manifest_problems": ("gauge", "Number of problems in the manifest set (0 = valid)."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {_number(value)}"
    return f"{name} {_number(value)}"


def _family(name: str, samples: Iterable[tuple[dict[str, str], float]]) -> list[str]:
    kind, text = _HELP[name]
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    lines += [_sample(name, labels, value) for labels, value in samples]
    return lines


def render(result, store, *, problems_count: int, last_pass_ts: float, duration: float,
           failed: bool = False) -> str:
    """The exposition text for one pass; ``store`` gives restarts and reservations.

    ``failed``: the pass raised; ``result`` is the last one known (its role
    series stay published) and ``reconciler_last_pass_success`` is 0.
    """
    records = {r.name: r for r in store.roles()} if store is not None else {}
    plan = getattr(result, "plan", None)
    decisions = {d.role: d for d in plan.decisions} if plan is not None else {}
    roles = sorted(set(decisions) | set(records))

    status_samples = []
    for role in roles:
        decision = decisions.get(role)
        current = decision.status if decision is not None else Status.UNKNOWN
        for status in Status:
            status_samples.append(({"role": role, "status": str(status)}, int(status is current)))

    restarts, reserved = [], []
    for role in roles:
        record = records.get(role)
        decision = decisions.get(role)
        count = record.restarts if record is not None else (decision.restarts if decision else 0)
        restarts.append(({"role": role}, count))
        reserved.append(({"role": role}, record.reserved if record is not None else 0))

    desired = getattr(result, "desired", None)
    budget = desired.node.memory_budget if desired is not None else None

    latency = []
    observed = getattr(result, "observed", None)
    if observed is not None:
        for obs in sorted(observed.roles, key=lambda o: o.name):
            if obs.probe is not None and obs.probe.latency is not None:
                latency.append(({"role": obs.name}, float(obs.probe.latency)))

    ok = not failed and bool(getattr(result, "ok", False)) and problems_count == 0
    lines: list[str] = []
    lines += _family("reconciler_role_status", status_samples)
    lines += _family("reconciler_role_restarts", restarts)
    lines += _family("reconciler_reserved_bytes", reserved)
    lines += _family("reconciler_memory_budget_bytes",
                     [({}, budget)] if budget is not None else [])
    lines += _family("reconciler_probe_latency_seconds", latency)
    lines += _family("reconciler_last_pass_timestamp_seconds", [({}, float(last_pass_ts))])
    lines += _family("reconciler_last_pass_duration_seconds", [({}, float(duration))])
    lines += _family("reconciler_last_pass_success", [({}, int(ok))])
    lines += _family("reconciler_manifest_problems", [({}, int(problems_count))])
    return "\n".join(lines) + "\n"


def render_result(result, store) -> str:
    """``render`` with the pass's own problems, start time and duration."""
    return render(result, store, problems_count=len(result.problems),
                  last_pass_ts=result.started, duration=result.duration)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` atomically (temporary file in the same directory, then rename)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    # The temporary name must not end in .prom: node_exporter would read it.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a collector runs as another user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_file(path: str | os.PathLike[str], result, store) -> None:
    """``--metrics-file``: the metrics of ``result``, atomically replacing ``path``."""
    write_text(path, render_result(result, store))


# ---------------------------------------------------------------- /metrics


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) on loopback; ValueError says why not."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--metrics-addr {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--metrics-addr {addr!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--metrics-addr {addr!r}: port {port} is out of range")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"--metrics-addr {addr!r}: {host!r} is not an IP address "
                         "(use 127.0.0.1 or [::1])") from None
    if not ip.is_loopback:
        raise ValueError(f"--metrics-addr {addr!r}: refusing a non-loopback address; "
                         "metrics are served on loopback only")
    return host, port


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    timeout = 5.0  # a stalled client cannot hold a thread forever

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0] != "/metrics":
            self._reply(404, b"not found; try /metrics\n", "text/plain; charset=utf-8")
            return
        self._reply(200, self.server.text.encode("utf-8"), CONTENT_TYPE)

    def _reply(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # scrapes are not worth a log line


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    text = "# no reconcile pass has finished yet\n"


class MetricsServer:
    """``/metrics`` on a loopback address, served from a daemon thread."""

    def __init__(self, addr: str) -> None:
        host, port = parse_addr(addr)
        server_class = _Server
        if ":" in host:
            server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        self._server = server_class((host, port), _Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
            name="reconciler-metrics", daemon=True,
        )
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def update(self, text: str) -> None:
        """What the next scrape returns (a plain attribute swap: no lock needed)."""
        self._server.text = text

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
