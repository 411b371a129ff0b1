"""Prometheus exposition, the atomic metrics file and the loopback /metrics server."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.report import metrics
from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord
from reconciler.state.store import Store
from tests.support.fakes import bad, desired, good, keep

DOCUMENTED = {
    "reconciler_role_status", "reconciler_role_restarts", "reconciler_reserved_bytes",
    "reconciler_memory_budget_bytes", "reconciler_probe_latency_seconds",
    "reconciler_last_pass_timestamp_seconds", "reconciler_last_pass_duration_seconds",
    "reconciler_last_pass_success", "reconciler_manifest_problems",
}

HOST = socket.gethostname()  # the node label when no NodeConfig names the node


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "state") as s:
        yield s


def record(name: str, **kw) -> RoleRecord:
    return RoleRecord(name=name, instance_id=f"{name}-0123abcd", runtime=Runtime.LLAMACPP,
                      mode=Mode.MANAGED, **kw)


def parse(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(families: dict, name: str, node: str = "test-node") -> dict:
    """{labels without ``node``: value}; every sample carries ``node``."""
    out = {}
    for s in families[name].samples:
        labels = dict(s.labels)
        assert labels.pop("node") == node, f"{name}: node label {s.labels.get('node')!r}"
        out[tuple(sorted(labels.items()))] = s.value
    return out


def test_the_node_label_falls_back_to_the_host_name(store):
    """Without a named NodeConfig (invalid manifests), every series names this host."""
    fams = parse(metrics.render_result(bad("oops"), store))
    assert samples(fams, "reconciler_manifest_problems", node=HOST) == {(): 1}


def test_render_parses_and_has_every_documented_series(store):
    """The text parses with prometheus_client and carries every documented family and value."""
    store.put_role(record("chat", restarts=2, reserved=1024))
    store.put_role(record("coder", reserved=4096))
    d = desired("chat", "coder", budget=10_000)
    backoff = flat(role="chat", verb=Verb.WAIT, reason=Reason.BACKOFF,
                       status=Status.BACKOFF, retry_in=4.0)
    result = good(d, backoff, keep("coder"), latency=0.0125)
    text = metrics.render(result, store, problems_count=0, last_pass_ts=1_700_000_000.5,
                          duration=0.25)
    fams = parse(text)
    assert DOCUMENTED <= set(fams)
    for name in DOCUMENTED:
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
    status = samples(fams, "reconciler_role_status")
    assert status[(("role", "chat"), ("status", "backoff"))] == 1
    assert status[(("role", "coder"), ("status", "running"))] == 1
    assert samples(fams, "reconciler_role_restarts") == {(("role", "chat"),): 2,
                                                         (("role", "coder"),): 0}
    assert samples(fams, "reconciler_reserved_bytes") == {(("role", "chat"),): 1024,
                                                          (("role", "coder"),): 4096}
    assert samples(fams, "reconciler_memory_budget_bytes") == {(): 10_000}
    assert samples(fams, "reconciler_probe_latency_seconds")[(("role", "chat"),)] == 0.0125
    assert samples(fams, "reconciler_last_pass_timestamp_seconds") == {(): 1_700_000_000.5}
    assert samples(fams, "reconciler_last_pass_duration_seconds") == {(): 0.25}
    assert samples(fams, "reconciler_manifest_problems") == {(): 0}
    assert samples(fams, "reconciler_last_pass_success") == {(): 1}


def test_role_status_is_one_hot_over_every_status(store):
    """Each role has one series per status, exactly one of them 1."""
    d = desired("a", "b", "c")
    fams = parse(metrics.render(good(d), store, problems_count=0, last_pass_ts=0, duration=0))
    by_role: dict[str, list[float]] = {}
    for s in fams["reconciler_role_status"].samples:
        by_role.setdefault(s.labels["role"], []).append(s.value)
    assert set(by_role) == {"a", "b", "c"}
    for values in by_role.values():
        assert len(values) == len(Status) and sorted(values) == [0] * (len(Status) - 1) + [1]


def test_invalid_manifests_count_problems_and_report_roles_unknown(store):
    """With nothing planned, the problems are counted and remembered roles read unknown."""
    store.put_role(record("chat", restarts=1))
    result = bad("port 99999 is out of range", "unknown key")
    fams = parse(metrics.render_result(result, store))
    assert samples(fams, "reconciler_manifest_problems", HOST) == {(): 2}
    assert samples(fams, "reconciler_last_pass_success", HOST) == {(): 0}
    assert samples(fams, "reconciler_role_status", HOST)[(("role", "chat"), ("status", "unknown"))] == 1
    assert samples(fams, "reconciler_memory_budget_bytes", HOST) == {}


def test_write_file_replaces_atomically(tmp_path, store):
    """A reader holding the old file keeps reading it whole; no temporary file is left."""
    target = tmp_path / "reconciler.prom"
    target.write_text("old contents\n")
    with open(target) as reader:
        metrics.write_file(target, good(desired("chat")), store)
        assert reader.read() == "old contents\n"
    assert "reconciler_role_status" in target.read_text()
    assert sorted(os.listdir(tmp_path)) == ["reconciler.prom", "state"]
    assert target.stat().st_mode & 0o777 == 0o644


def test_write_failure_after_the_temporary_leaves_the_old_file_and_removes_it(
        tmp_path, store, monkeypatch):
    """The write fails after the temporary exists (no space): old file kept, temporary removed."""
    target = tmp_path / "reconciler.prom"
    target.write_text("old\n")
    made: list[str] = []

    def full(fd: int) -> None:
        made.extend(name for name in os.listdir(tmp_path) if name.endswith(".tmp"))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        metrics.write_file(target, good(desired("chat")), store)
    assert made  # the failure came after the temporary file was made
    assert target.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["reconciler.prom", "state"]


def test_a_failed_rename_removes_the_temporary(tmp_path, store):
    """The rename fails (the target is a directory): it raises and leaves no temporary file."""
    target = tmp_path / "reconciler.prom"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        metrics.write_file(target, good(desired("chat")), store)
    assert sorted(os.listdir(tmp_path)) == ["reconciler.prom", "state"]
    assert os.listdir(target) == ["inside"]


@pytest.mark.parametrize("addr, expected", [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("localhost:9464", ("127.0.0.1", 9464)),
    ("127.0.0.2:0", ("127.0.0.2", 0)),
    ("[::1]:9464", ("::1", 9464)),
])
def test_parse_addr_accepts_loopback(addr, expected):
    """Loopback IPv4/IPv6 and localhost are accepted."""
    assert metrics.parse_addr(addr) == expected


@pytest.mark.parametrize("addr", [
    "0.0.0.0:9464", "[::]:9464", "192.168.1.10:9464", "example.com:9464", "9464",
    "127.0.0.1:http", "127.0.0.1:70000",
])
def test_parse_addr_refuses_everything_else(addr):
    """Wildcards, LAN addresses, host names and malformed values are refused."""
    with pytest.raises(ValueError):
        metrics.parse_addr(addr)


def test_server_serves_the_registry_at_scrape_time_on_loopback(store):
    """GET /metrics collects the registry when scraped (a later pass shows), with the
    exposition content type; other paths 404."""
    published = metrics.DaemonMetrics()
    server = metrics.MetricsServer("127.0.0.1:0", published.registry)
    try:
        host, port = server.address
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def scrape() -> dict:
            with opener.open(f"http://{host}:{port}/metrics", timeout=5) as answer:
                assert answer.headers["Content-Type"] == metrics.CONTENT_TYPE
                return parse(answer.read().decode())

        published.passes.update(good(desired("chat")), store, problems_count=0,
                                last_pass_ts=1.0, duration=0.1)
        assert samples(scrape(), "reconciler_last_pass_timestamp_seconds") == {(): 1.0}
        published.passes.update(bad("oops"), store, problems_count=1, last_pass_ts=2.0,
                                duration=0.1)
        later = scrape()
        assert samples(later, "reconciler_last_pass_timestamp_seconds", HOST) == {(): 2.0}
        assert samples(later, "reconciler_manifest_problems", HOST) == {(): 1}
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open(f"http://{host}:{port}/", timeout=5)
        assert err.value.code == 404
        err.value.close()
    finally:
        server.close()


def test_server_refuses_non_loopback():
    """The server never binds a non-loopback address."""
    with pytest.raises(ValueError):
        metrics.MetricsServer("0.0.0.0:0", metrics.DaemonMetrics().registry)
