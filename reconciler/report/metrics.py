"""Prometheus metrics through ``prometheus_client`` (SHELL; the only module that imports prometheus_client).

Every series carries the ``node`` label (the NodeConfig's name, else the
``--node`` name, else the host name), so one Prometheus can watch a fleet. What a pass publishes:

====================================================  =====  ===========================
series                                                type   from
====================================================  =====  ===========================
``reconciler_role_status{node,role,status}``          gauge  one-hot over every status
``reconciler_role_restarts{node,role}``               gauge  restart count (§4; resets)
``reconciler_role_revision{node,role,revision,        gauge  1: the manifests commit the role
generation}``                                                was planned from, and the
                                                             generation its record ran (§13)
``reconciler_rollout_rolled_back{node,role,           gauge  1: the node rolled the role back
revision}``                                                  from this commit (§13); it closes
                                                             the gate of the later waves
``reconciler_reserved_bytes{node,role}``              gauge  the residency ledger (§7)
``reconciler_memory_budget_bytes{node}``              gauge  NodeConfig (absent: none)
``reconciler_probe_latency_seconds{node,role}``       gauge  the pass's readiness probe
``reconciler_last_pass_timestamp_seconds{node}``      gauge  unix time the pass began
``reconciler_last_pass_duration_seconds{node}``       gauge
``reconciler_last_pass_success{node}``                gauge  1 when every action worked
                                                             (0 when the pass raised)
``reconciler_manifest_problems{node}``                gauge  0 when the manifests are valid
``reconciler_last_pass_actions{node,verb,reason}``    gauge  acting decisions of the last pass
``reconciler_device_memory_bytes{node,device}``       gauge  NodeConfig devices (§7.1)
``reconciler_device_reserved_bytes{node,device,role}`` gauge the device ledger (§7.1)
``reconciler_device_used_bytes{node,device,role}``    gauge  observed by pid (NVML, nvidia-smi)
``reconciler_fetch_bytes_total{node,model}``          count  bytes of the Model in the cache
                                                             (§1.6; partial files count)
``reconciler_fetch_remaining_bytes{node,model}``      gauge  bytes still to fetch
====================================================  =====  ===========================

The restart count is a gauge, not a ``_total`` counter: BEHAVIOUR §4 resets
it after ``stable_after`` and on ``reconcile start``.

The router (§9) adds, per role, through ``RouterMetrics``:

==============================================================  =========  ======================
``reconciler_router_requests_total{node,role,code}``            counter    every answered request
``reconciler_router_in_flight{node,role}``                      gauge      being forwarded now
``reconciler_router_queued{node,role}``                         gauge      waiting for the role
``reconciler_router_queue_wait_seconds{node,role}``             histogram  time spent waiting
``reconciler_router_time_to_first_byte_seconds{node,role}``     histogram  arrival → first byte back
``reconciler_router_cold_starts_total{node,role}``              counter    starts on demand
``reconciler_router_evictions_total{node,role}``                counter    stopped for another role
``reconciler_router_client_requests_total{node,role,key}``      counter    answered, per client
``reconciler_router_tokens_total{node,role,key,kind}``          counter    usage: prompt, completion
``reconciler_router_cut_requests_total{node,role}``             counter    cut after drain_timeout
==============================================================  =========  ======================

``PassMetrics`` is a ``prometheus_client`` collector holding the families of
the last pass; ``new_registry()`` puts one in a registry of its own, to which
the daemon's other parts (the router) add their collectors. ``render()`` is the
one-shot text of one pass (``--once --metrics-file``). ``write_text()`` is for
node_exporter's textfile collector: a temporary file in the same directory
(never named ``*.prom``), fsynced, renamed over the target, so a scrape never
reads half a file. ``MetricsServer`` serves a registry on ``/metrics`` from a
daemon thread, collected at scrape time; it binds loopback addresses only (the
server itself, which needs no prometheus_client, is ``metricsserver.py``).

``prometheus_client`` costs tens of milliseconds to import: only the daemon and
``--metrics-file`` import this module, so a plain ``--once`` never pays it.

Size: the only owner of prometheus_client, so one idea: what the reconciler
publishes through it (the documented families above, the pass's and the
router's, their exposition and the textfile). The HTTP server that serves them
is ``metricsserver.py``.
"""

from __future__ import annotations

import os
import socket
import tempfile

from prometheus_client import (
    CollectorRegistry, Counter, Histogram, generate_latest, make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reconciler.core.decisions import Status
from reconciler.report import metricsserver
from reconciler.report.metricsserver import parse_addr

__all__ = ["CONTENT_TYPE", "DaemonMetrics", "MetricsServer", "PassMetrics", "RouterMetrics",
           "new_registry", "parse_addr", "render", "render_result", "write_file", "write_text"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "reconciler_role_status": "Current status of each role (one series per status, 1 for the current one).",
    "reconciler_role_restarts": "Restarts counted by the restart policy (reset after stable_after or reconcile start).",
    "reconciler_role_revision": "1 per role: the manifests revision (git commit) it was planned from, and the generation (§4) it runs.",
    "reconciler_rollout_rolled_back": "1 per role this node rolled back from a revision (§13): it does not take that commit again.",
    "reconciler_reserved_bytes": "Bytes each role holds in the residency ledger.",
    "reconciler_memory_budget_bytes": "The NodeConfig memory budget in bytes (absent when there is none).",
    "reconciler_probe_latency_seconds": "Latency of the last readiness probe of each role.",
    "reconciler_last_pass_timestamp_seconds": "Unix time at which the last reconcile pass began.",
    "reconciler_last_pass_duration_seconds": "Duration of the last reconcile pass.",
    "reconciler_last_pass_success": "1 if the last pass's actions all succeeded, else 0.",
    "reconciler_manifest_problems": "Number of problems in the manifest set (0 = valid).",
    "reconciler_last_pass_actions": "Acting decisions (start, stop, restart, load, unload) of the last pass, by verb and reason.",
    "reconciler_device_memory_bytes": "Memory of each declared device (NodeConfig devices) in bytes.",
    "reconciler_device_reserved_bytes": "Bytes each role reserves on each device in the device ledger.",
    "reconciler_device_used_bytes": "Bytes each role's server uses on each device (NVML / nvidia-smi, by pid).",
    "reconciler_fetch_bytes": "Bytes of each fetched Model already in this node's cache (partial files included).",
    "reconciler_fetch_remaining_bytes": "Bytes of each fetched Model still to download.",
    "reconciler_program_info": "The Program each managed role runs (§14): its name, version and "
                               "the sha256 of its file list; always 1.",
}


def node_name(result) -> str:
    """The ``node`` label: the NodeConfig's name, else the ``--node`` name, else the host's."""
    desired = getattr(result, "desired", None)
    name = desired.node.name if desired is not None else ""
    return name or getattr(result, "node", "") or socket.gethostname()


def _families(result, store, *, problems_count: int, last_pass_ts: float, duration: float,
              failed: bool, node: str | None) -> list[GaugeMetricFamily]:
    node = node or node_name(result)
    records = {r.name: r for r in store.roles()} if store is not None else {}
    plan = getattr(result, "plan", None)
    decisions = {d.role: d for d in plan.decisions} if plan is not None else {}
    roles = sorted(set(decisions) | set(records))

    def family(name: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, _HELP[name], labels=("node", *labels))

    status = family("reconciler_role_status", ("role", "status"))
    restarts = family("reconciler_role_restarts", ("role",))
    reserved = family("reconciler_reserved_bytes", ("role",))
    # §13 what a rollout's gate reads: which revision and generation each role is on.
    revision = family("reconciler_role_revision", ("role", "revision", "generation"))
    commit = getattr(result, "git_commit", None) or ""
    staged = dict(getattr(result, "revisions", ()))  # §13 a staged role's own revision
    wanted = {r.name for r in desired.roles} if (desired := getattr(result, "desired", None)) \
        is not None else set()
    for role in roles:
        decision = decisions.get(role)
        record = records.get(role)
        current = decision.status if decision is not None else Status.UNKNOWN
        for each in Status:
            status.add_metric((node, role, str(each)), int(each is current))
        count = record.restarts if record is not None else (decision.restarts if decision else 0)
        restarts.add_metric((node, role), count)
        reserved.add_metric((node, role), record.reserved if record is not None else 0)
        if role in wanted:
            ran = record.generation if record is not None and record.generation else ""
            revision.add_metric((node, role, staged.get(role, commit), ran), 1)

    budget = family("reconciler_memory_budget_bytes")
    if desired is not None and desired.node.memory_budget is not None:
        budget.add_metric((node,), desired.node.memory_budget)

    latency = family("reconciler_probe_latency_seconds", ("role",))
    observed = getattr(result, "observed", None)
    for obs in sorted(observed.roles if observed is not None else (), key=lambda o: o.name):
        if obs.probe is not None and obs.probe.latency is not None:
            latency.add_metric((node, obs.name), float(obs.probe.latency))

    ok = not failed and bool(getattr(result, "ok", False)) and problems_count == 0
    last = family("reconciler_last_pass_timestamp_seconds")
    last.add_metric((node,), float(last_pass_ts))
    took = family("reconciler_last_pass_duration_seconds")
    took.add_metric((node,), float(duration))
    success = family("reconciler_last_pass_success")
    success.add_metric((node,), int(ok))
    problems = family("reconciler_manifest_problems")
    problems.add_metric((node,), int(problems_count))
    # What the pass did, by verb and reason: `stop` with reason `orphan` or
    # `exposed` is what an alert wants to see (deploy/prometheus/).
    actions = family("reconciler_last_pass_actions", ("verb", "reason"))
    acted: dict[tuple[str, str], int] = {}
    for decision in decisions.values():
        if decision.acts:
            key = (str(decision.verb), str(decision.reason))
            acted[key] = acted.get(key, 0) + 1
    for (verb, reason), count in sorted(acted.items()):
        actions.add_metric((node, verb, reason), count)
    # §7.1 devices: each one's memory, and what each role reserves and uses on it.
    dev_memory = family("reconciler_device_memory_bytes", ("device",))
    dev_reserved = family("reconciler_device_reserved_bytes", ("device", "role"))
    dev_used = family("reconciler_device_used_bytes", ("device", "role"))
    if desired is not None and desired.node.devices and plan is not None:
        from reconciler.planner import placement

        uses = placement.uses_by_pid(observed.device_use if observed is not None else ())
        for row in placement.device_table(desired.node, plan.decisions, uses):
            dev_memory.add_metric((node, row["device"]), row["memory"])
            for holder in row["holders"]:
                dev_reserved.add_metric((node, row["device"], holder["role"]), holder["reserved"])
                if holder["used"] is not None:
                    dev_used.add_metric((node, row["device"], holder["role"]), holder["used"])
    fetched = CounterMetricFamily("reconciler_fetch_bytes", _HELP["reconciler_fetch_bytes"],
                                  labels=("node", "model"))
    remaining = family("reconciler_fetch_remaining_bytes", ("model",))
    for f in observed.fetches if observed is not None else ():  # §1.6
        fetched.add_metric((node, f.model), f.total - f.missing)
        remaining.add_metric((node, f.model), f.missing)
    programs = family("reconciler_program_info", ("role", "program", "version", "sha256"))
    for role in desired.roles if desired is not None else ():  # §14
        pinned = desired.program_for(role) if role.managed else None
        if pinned is not None:
            programs.add_metric((node, role.name, pinned.name, pinned.version, pinned.digest), 1)
    return [status, restarts, revision, reserved, budget, latency, last, took, success, problems, actions,
            dev_memory, dev_reserved, dev_used, fetched, remaining, programs]


class PassMetrics(Collector):
    """A collector publishing the families of the last pass (swapped whole, no lock)."""

    def __init__(self) -> None:
        self._families: list[GaugeMetricFamily] = []

    def update(self, result, store, *, problems_count: int, last_pass_ts: float,
               duration: float, failed: bool = False, node: str | None = None) -> None:
        """Publish ``result``; ``failed``: the pass raised, ``result`` is the last one known
        (its role series stay published) and ``reconciler_last_pass_success`` is 0."""
        self._families = _families(result, store, problems_count=problems_count,
                                   last_pass_ts=last_pass_ts, duration=duration,
                                   failed=failed, node=node)
        self._families.append(_rolled_back(result, node or node_name(result)))

    def collect(self):  # type: ignore[override]
        return iter(self._families)


def _rolled_back(result, node: str) -> GaugeMetricFamily:
    """§13 ``reconciler_rollout_rolled_back{node,role,revision}``: 1 per rollback in force."""
    rolled_back = GaugeMetricFamily("reconciler_rollout_rolled_back",
                                    _HELP["reconciler_rollout_rolled_back"],
                                    labels=("node", "role", "revision"))
    for role, failed in getattr(result, "rolled_back", ()):
        rolled_back.add_metric((node, role, failed), 1)
    return rolled_back


def new_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of its own (never the process-global default) holding ``collectors``."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> str:
    """The text exposition format (0.0.4) of everything in ``registry`` now."""
    return generate_latest(registry).decode("utf-8")


def render(result, store, *, problems_count: int, last_pass_ts: float, duration: float,
           failed: bool = False, node: str | None = None) -> str:
    """The exposition text of one pass; ``store`` gives restarts and reservations."""
    collector = PassMetrics()
    collector.update(result, store, problems_count=problems_count, last_pass_ts=last_pass_ts,
                     duration=duration, failed=failed, node=node)
    return exposition(new_registry(collector))


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


class MetricsServer(metricsserver.LoopbackServer):
    """``/metrics`` of ``registry`` on a loopback address, served from a daemon thread
    (``metricsserver.LoopbackServer``: the address rule, the scrape cap and deadline)."""

    def __init__(self, addr: str, registry: CollectorRegistry) -> None:
        super().__init__(addr, make_wsgi_app(registry))


class DaemonMetrics:
    """What ``reconcile watch`` publishes: one registry, mirrored to a file if asked.

    ``passes`` holds the last pass's families; the daemon's other parts (the
    router) register their own collectors in ``registry``. ``MetricsServer``
    serves the registry at scrape time; ``publish()`` updates the pass's
    families and rewrites ``file`` (if any) with everything in the registry.
    """

    def __init__(self, file: str | None = None) -> None:
        self.file = file
        self.passes = PassMetrics()
        self.registry = new_registry(self.passes)

    def text(self) -> str:
        return exposition(self.registry)

    def write(self) -> None:
        if self.file:
            write_text(self.file, self.text())


# ---------------------------------------------------------------- the router (§9)

#: Latency buckets (seconds) from a loopback hop (~1 ms) to a cold start of a big model.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0, 120.0, 300.0)


class _RouterGauges(Collector):
    """In flight and queued per role, read from the router's book at scrape time."""

    def __init__(self, metrics: "RouterMetrics") -> None:
        self._metrics = metrics

    def collect(self):  # type: ignore[override]
        node = self._metrics.node
        flying = GaugeMetricFamily("reconciler_router_in_flight",
                                   "Requests the router is forwarding to each role now.",
                                   labels=("node", "role"))
        queued = GaugeMetricFamily("reconciler_router_queued",
                                   "Requests waiting for each role to be ready.",
                                   labels=("node", "role"))
        snapshot = self._metrics.snapshot
        for role in (snapshot().roles if snapshot is not None else ()):
            flying.add_metric((node, role.role), role.in_flight)
            queued.add_metric((node, role.role), role.waiting + role.queued)
        return iter((flying, queued))


class RouterMetrics:
    """The router's per-role series in the daemon's registry (the router calls it on its loop)."""

    def __init__(self, registry: CollectorRegistry, node: str = "") -> None:
        self.node = node or socket.gethostname()
        self.snapshot = None  # () -> demand.Demand: the router's book, set when it starts
        labels = ("node", "role")
        self._requests = Counter("reconciler_router_requests", "Requests the router answered, "
                                 "by role and HTTP status.", (*labels, "code"), registry=registry)
        self._wait = Histogram("reconciler_router_queue_wait_seconds", "Time requests waited "
                               "for their role to be ready.", labels, buckets=_LATENCY,
                               registry=registry)
        self._ttfb = Histogram("reconciler_router_time_to_first_byte_seconds", "From a "
                               "request's arrival to the first byte of its answer (waiting "
                               "included).", labels, buckets=_LATENCY, registry=registry)
        self._cold = Counter("reconciler_router_cold_starts", "Roles started because requests "
                             "waited for them.", labels, registry=registry)
        self._evicted = Counter("reconciler_router_evictions", "On-demand roles stopped to make "
                                "room for another role.", labels, registry=registry)
        self._clients = Counter("reconciler_router_client_requests", "Requests the router "
                                "answered, by role and client (its api_keys_file name).",
                                (*labels, "key"), registry=registry)
        self._tokens = Counter("reconciler_router_tokens", "Tokens of the answers' usage, by "
                               "role, client and kind (prompt, completion).",
                               (*labels, "key", "kind"), registry=registry)
        self._cut = Counter("reconciler_router_cut_requests", "Requests still in flight when "
                            "drain_timeout ran out before a stop (cut by it).", labels,
                            registry=registry)
        self._out = Counter("reconciler_router_out_of_rotation", "Times an instance was taken "
                            "out of its group's rotation (refused, 5xx, or failed while "
                            "answering; §9.1).", labels, registry=registry)
        self._lost = Counter("reconciler_router_lost_requests", "Requests that failed in "
                             "flight on an instance that failed (§9.1).", labels,
                             registry=registry)
        registry.register(_RouterGauges(self))

    def client(self, role: str, key: str, usage: tuple[int, int] | None) -> None:
        """One answered request of client ``key``, and its token usage if known."""
        self._clients.labels(self.node, role, key).inc()
        if usage is not None:
            self._tokens.labels(self.node, role, key, "prompt").inc(usage[0])
            self._tokens.labels(self.node, role, key, "completion").inc(usage[1])

    def out_of_rotation(self, role: str) -> None:
        self._out.labels(self.node, role).inc()

    def lost(self, role: str) -> None:
        self._lost.labels(self.node, role).inc()

    def cut(self, role: str, count: int) -> None:
        self._cut.labels(self.node, role).inc(count)

    def request(self, role: str, code: int) -> None:
        self._requests.labels(self.node, role, str(code)).inc()

    def queue_wait(self, role: str, seconds: float) -> None:
        self._wait.labels(self.node, role).observe(seconds)

    def first_byte(self, role: str, seconds: float) -> None:
        self._ttfb.labels(self.node, role).observe(seconds)

    def cold_start(self, role: str) -> None:
        self._cold.labels(self.node, role).inc()

    def eviction(self, role: str) -> None:
        self._evicted.labels(self.node, role).inc()
