"""§13 the Prometheus gate: what it asks, how an answer reads, and a real Prometheus.

The last test starts Debian's ``prometheus`` on a loopback port, scraping two
stand-in nodes that serve the reconciler's own exposition (``metrics.render``),
with deploy/prometheus/reconciler-rollout-rules.yml loaded, and asks the gate
the query the documentation gives.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import attrs
import pytest

from reconciler.core.decisions import Status
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord
from reconciler.core.rollouts import PrometheusGate, Rollout
from reconciler.planner import rolloutgate
from reconciler.planner.rollout import GateAnswer
from reconciler.report import metrics
from reconciler.world.gate import PrometheusAsk
from tests.fleet.test_deploy import need
from tests.doubles.fileserver import free_port
from tests.support import exposition
from tests.support.fakes import desired, good, keep

ROOT = Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus"
#: The gate query docs/behaviour.md §13 and the rules file give.
QUERY = ('(count(reconciler:node_healthy_revision{revision="$revision", node=~"$nodes"} == 1)'
         ' or vector(0)) >= bool $count')


def vector(*values) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"node": f"gpu-{i}"}, "value": [1.0, v]} for i, v in enumerate(values)]}}


def test_golden_answers() -> None:
    """Open only for a non-empty vector of non-zero numbers; empty, 0, NaN, a scalar, an
    error, no answer: hold, with the reason."""
    cases = [
        (200, vector("1", "2"), "", True, "2 samples healthy"),
        (200, vector(), "", False, "the query gave no sample (no node reported yet?)"),
        (200, vector("1", "0"), "", False, "1 of 2 samples not healthy: {node='gpu-1'} = 0.0"),
        (200, vector("NaN"), "", False, "1 of 1 samples not healthy: {node='gpu-0'} = ?"),
        (200, {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}, "",
         None, "the query must give an instant vector, not scalar"),
        (400, {"status": "error", "error": "parse error"}, "", None, "query failed: parse error"),
        (502, None, "", None, "Prometheus answered HTTP 502 without JSON"),
        (None, None, "Connection refused", None, "Prometheus unreachable: Connection refused"),
    ]
    for status, body, error, is_open, reason in cases:
        assert rolloutgate.read(status, body, error) == GateAnswer(open=is_open, reason=reason)


def test_the_query_names_the_revision_the_wave_and_the_earlier_nodes() -> None:
    """$revision, $wave, $nodes (anchored, dots escaped for a double-quoted PromQL string)
    and $count are substituted; no earlier node matches no label value at all."""
    gate = PrometheusGate(url="http://p:9090", query='f{r="$revision",w="$wave",n=~"$nodes"} >= $count')
    assert rolloutgate.query(gate, "early", revision="abc", nodes=["gpu.2", "gpu-1"]) == (
        'f{r="abc",w="early",n=~"gpu-1|gpu\\\\.2"} >= 2')
    assert rolloutgate.query(gate, "early", revision="abc", nodes=[]) == (
        'f{r="abc",w="early",n=~"$^"} >= 0')


def test_a_bake_asks_that_the_expression_held_all_along() -> None:
    """With a bake the expression's minimum over the bake, times 0 unless it had a value at
    each of the bake's 20 points (a series a minute old has not baked 15 minutes)."""
    gate = PrometheusGate(url="http://p:9090", query="up", bake=900)
    assert rolloutgate.query(gate, "w", revision="r", nodes=[]) == (
        "min_over_time((up)[900s:45s]) * (count_over_time((up)[900s:45s]) >= bool 20)")


def test_an_unreachable_prometheus_holds() -> None:
    """Nothing listening: the answer is unknown, never open, and says why."""
    rollout = Rollout(name="r", start=0, duration=1,
                      gate=PrometheusGate(url=f"http://127.0.0.1:{free_port()}", query="up"))
    got = PrometheusAsk(timeout=2).ask(rollout, "w", revision="r", nodes=[])
    assert got.open is None and got.reason.startswith("Prometheus unreachable: ")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([need("promtool"), *args], capture_output=True, text=True,
                          timeout=60, cwd=RULES)


def test_the_rollout_rules_check_and_pass_their_unit_tests() -> None:
    """promtool check rules and test rules: the records a gate reads say 1 for a node whose
    roles are healthy on the revision, 0 for one in gave-up; the alert names the node."""
    done = promtool("check", "rules", "reconciler-rollout-rules.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    done = promtool("test", "rules", "reconciler-rollout-rules.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


class _Records:
    def __init__(self, generation: str) -> None:
        self.generation = generation

    def roles(self):
        return (RoleRecord(name="coder", instance_id="i", runtime=Runtime.LLAMACPP,
                           mode=Mode.MANAGED, generation=self.generation),)


def _node_metrics(node: str, status: Status) -> bytes:
    """One node's exposition as the reconciler writes it: coder on revision r2, ``status``."""
    decision = attrs.evolve(keep("coder"), status=status)
    result = attrs.evolve(good(desired("coder"), decision), git_commit="r2")
    return metrics.render(result, _Records("g2"), problems_count=0, last_pass_ts=1.0,
                          duration=0.1, node=node).encode()


def _serve(body: bytes):
    return exposition.serve(lambda: body)


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping gpu-1 (coder running) and gpu-2 (coder gave up) every
    second, with the rollout rules evaluated every second; its URL."""
    exe = need("prometheus")
    nodes = [_serve(_node_metrics("gpu-1", Status.RUNNING)),
             _serve(_node_metrics("gpu-2", Status.GAVE_UP))]
    port = free_port()
    targets = ", ".join(f'"127.0.0.1:{s.server_address[1]}"' for s in nodes)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{RULES / 'reconciler-rollout-rules.yml'}]\n"
        "scrape_configs:\n"
        f"  - {{job_name: nodes, honor_labels: true, static_configs: [{{targets: [{targets}]}}]}}\n")
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [exe, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        for s in nodes:
            s.shutdown()
            s.server_close()


def _until(ask, deadline: float) -> GateAnswer:
    while True:
        got = ask()
        if got.open or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def test_a_real_prometheus_opens_the_gate_for_healthy_nodes_and_holds_otherwise(prometheus) -> None:
    """The documented query over the nodes' own metrics: open when the earlier waves' nodes
    (gpu-1) are healthy on the revision; held when one gave up (gpu-2), when one does not
    report (gpu-9), on another revision, for a bake longer than the series have lived, and
    for a query Prometheus refuses. Held until the first scrapes arrive, too."""
    ask = PrometheusAsk(timeout=3)

    def rollout(bake: float = 0, query: str = QUERY) -> Rollout:
        return Rollout(name="r", start=0, duration=1,
                       gate=PrometheusGate(url=prometheus, query=query, bake=bake))

    first = ask.ask(rollout(), "w", revision="r2", nodes=["gpu-1"])
    got = _until(lambda: ask.ask(rollout(), "w", revision="r2", nodes=["gpu-1"]),
                 time.monotonic() + 12)
    assert got == GateAnswer(open=True, reason="1 sample healthy"), got
    assert first.open is not True or got.open  # (the first may already see the scrape)
    for nodes, revision in ((["gpu-1", "gpu-2"], "r2"), (["gpu-1", "gpu-9"], "r2"),
                            (["gpu-1"], "r1")):
        held = ask.ask(rollout(), "w", revision=revision, nodes=nodes)
        assert held.open is False and "not healthy" in held.reason, (nodes, revision, held)
    assert ask.ask(rollout(bake=600), "w", revision="r2", nodes=["gpu-1"]).open is False
    baked = _until(lambda: ask.ask(rollout(bake=3), "w", revision="r2", nodes=["gpu-1"]),
                   time.monotonic() + 8)
    assert baked.open is True, baked
    refused = ask.ask(rollout(query="sum(("), "w", revision="r2", nodes=[])
    assert refused.open is None and refused.reason.startswith("query failed: "), refused
