"""Liveness counters (reconciler.liveness, BEHAVIOUR §4.1): detectors, grace, a period apart."""

from __future__ import annotations

import textwrap

from hypothesis import given, strategies as st

from reconciler.planner import liveness
from reconciler.manifests import loader
from reconciler.core.desired import LivenessSpec
from reconciler.core.observed import Health, Liveness, ProbeFacts, Progress
from reconciler.runtimes import llamacpp
from reconciler.runtimes.common import ErrorKind, ProbeAnswer

SPEC = LivenessSpec(period=10.0, timeout=1.0, failures=3, grace=60.0)
HUNG = ProbeFacts(health=Health.UNREACHABLE, timed_out=True,
                  detail="no answer to GET /health within 1s")
UP = ProbeFacts(health=Health.UP, detail="healthy")
REFUSED = ProbeFacts(health=Health.UNREACHABLE, detail="connection refused")
STARTED = 0.0


def _busy(decoded: float, in_flight: float = 1) -> ProbeFacts:
    return ProbeFacts(health=Health.UP, progress=Progress(in_flight=in_flight, decoded=decoded))


def _run(looks, *, started=STARTED, counters=Liveness()):
    for now, probe in looks:
        counters = liveness.look(SPEC, counters, probe, started, now)
    return counters


def test_a_hung_server_fails_one_check_a_period_until_unresponsive():
    """Timeouts a period apart count 1, 2, 3; the third makes it unresponsive."""
    seen = []
    counters = Liveness()
    for now in (100.0, 110.0, 120.0):
        counters = liveness.look(SPEC, counters, HUNG, STARTED, now)
        seen.append((counters.failures, liveness.unresponsive(SPEC, counters)))
    assert seen == [(1, False), (2, False), (3, True)]
    assert counters.since == 100.0 and counters.checked_at == 120.0
    assert liveness.summary(SPEC, counters) == (
        "unresponsive: no answer to GET /health within 1s (3 of 3 liveness checks failed)")


def test_passes_sooner_than_a_period_do_not_count_twice():
    """A file event's extra pass inside the period adds no failure."""
    counters = _run([(100.0, HUNG), (101.0, HUNG), (105.0, HUNG), (108.0, HUNG)])
    assert counters.failures == 1
    assert _run([(100.0, HUNG), (109.0, HUNG)]).failures == 2  # within the slack: counted


def test_an_answer_starts_the_count_over():
    """One answered check resets the failures: only consecutive ones count."""
    counters = _run([(100.0, HUNG), (110.0, HUNG), (120.0, UP), (130.0, HUNG)])
    assert counters.failures == 1 and counters.since == 130.0


def test_a_refused_connection_is_no_liveness_failure_and_resets_nothing():
    """Refused means gone or not listening: the process table's business, not a hang."""
    counters = _run([(100.0, HUNG), (110.0, REFUSED)])
    assert counters.failures == 1
    assert _run([(100.0, REFUSED)]) == Liveness()


def test_nothing_counts_before_grace():
    """Checks inside grace after the start never count, whatever they find."""
    counters = _run([(10.0, HUNG), (20.0, HUNG), (30.0, HUNG), (59.0, HUNG)])
    assert counters.failures == 0
    assert _run([(10.0, HUNG), (60.0, HUNG)]).failures == 1


def test_no_progress_needs_requests_in_flight_and_a_flat_counter_for_a_period():
    """In flight, counter flat 10 s → failed; moving or idle → passes."""
    flat = _run([(100.0, _busy(50)), (105.0, _busy(50)), (110.0, _busy(50))])
    assert flat.failures == 1
    assert flat.detail == "no progress: 1 request in flight, decode counter flat at 50 for 10s"
    moving = _run([(100.0 + 10 * i, _busy(50 + i)) for i in range(10)])
    assert moving.failures == 0
    idle = _run([(100.0 + 10 * i, _busy(50, in_flight=0)) for i in range(10)])
    assert idle.failures == 0


def test_a_busy_server_that_moves_is_never_unresponsive():
    """A long generation whose counter moves between every look never fails a check."""
    counters = _run([(100.0 + 10 * i, _busy(1000 + 37 * i, in_flight=2)) for i in range(100)])
    assert counters.failures == 0


def test_an_unanswered_progress_request_fails_the_check():
    """/metrics timing out (llama-server answers it from its main loop) is a failed check."""
    probe = ProbeFacts(health=Health.UP, progress_timeout="no answer to GET /metrics within 1s")
    assert _run([(100.0, probe)]).detail == "no answer to GET /metrics within 1s"


def test_next_check_is_the_grace_end_then_a_period_after_the_last_count():
    """The daemon's requeue hint: when grace ends, then a period after the last counted check."""
    assert liveness.next_check(SPEC, Liveness(), STARTED, 20.0) == 40.0
    assert liveness.next_check(SPEC, Liveness(), STARTED, 100.0) == 10.0
    assert liveness.next_check(SPEC, Liveness(failures=1, checked_at=95.0), STARTED, 100.0) == 5.0


@given(st.lists(st.sampled_from([HUNG, UP, REFUSED, _busy(5), _busy(6)]), max_size=30),
       st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=30, max_size=30))
def test_failures_never_outrun_the_clock(probes, gaps):
    """However the looks come, n failures take at least (n-1) x 0.9 period since the first."""
    counters, now = Liveness(), 100.0
    for probe, gap in zip(probes, gaps):
        now += gap
        counters = liveness.look(SPEC, counters, probe, STARTED, now)
        if counters.failures:
            assert counters.since is not None and counters.checked_at is not None
            assert counters.checked_at - counters.since >= (counters.failures - 1) * 9.0 - 1e-9


def test_llama_metrics_are_read_from_the_exposition():
    """requests_processing and n_decode_total from llama-server's /metrics text."""
    text = textwrap.dedent("""\
        # HELP llamacpp:n_decode_total Total number of llama_decode() calls
        # TYPE llamacpp:n_decode_total counter
        llamacpp:n_decode_total 505
        llamacpp:tokens_predicted_total 505
        llamacpp:requests_processing 2
        """)
    assert llamacpp.read_progress(ProbeAnswer(status=200, text=text)) == Progress(
        in_flight=2, decoded=505)
    assert llamacpp.read_progress(ProbeAnswer(status=200, text="llamacpp:n_decode_total 5")) is None
    assert llamacpp.read_progress(ProbeAnswer(status=501, text=text)) is None
    assert llamacpp.read_progress(ProbeAnswer(error=ErrorKind.TIMEOUT)) is None


def test_metrics_are_asked_only_of_a_launch_with_metrics():
    """The progress request is the runtime's capability, used only with --metrics."""
    result = _load("extra_args: [--metrics]")
    (role,) = result.desired.roles
    assert llamacpp.SPEC.progress.asked(role)
    (plain,) = _load("").desired.roles
    assert not llamacpp.SPEC.progress.asked(plain)


def _load(serve_extra: str, liveness_yaml: str = "liveness: {period: 1s, failures: 2}"):
    text = textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: node}}
        spec: {{allowed_ports: {{from: 8000, to: 9000}}}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec: {{format: gguf, root: /m, shards: [{{path: t.gguf, size: 1, sha256: {"a" * 64}}}]}}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: chat}}
        spec:
          runtime: llamacpp
          mode: managed
          model: tiny
          serve: {{port: 8090, {serve_extra}}}
          {liveness_yaml}
        """)
    return loader.load([("m.yaml", text.encode())])


def test_the_loader_fills_defaults_and_keeps_liveness_off_unless_asked():
    """spec.liveness given: its fields over the defaults (30s, 5s, 3, 10m); absent: None."""
    result = _load("")
    assert result.desired is not None, result.problems
    assert result.desired.roles[0].liveness == LivenessSpec(period=1.0, timeout=5.0, failures=2,
                                                            grace=600.0)
    assert LivenessSpec() == LivenessSpec(period=30.0, timeout=5.0, failures=3, grace=600.0)
    assert _load("", "").desired.roles[0].liveness is None
    assert _load("", "liveness: {}").desired.roles[0].liveness == LivenessSpec()


def test_the_loader_refuses_zero_durations_and_an_unknown_field():
    """period/timeout 0, failures 0 and a misspelt field are problems with their path."""
    def said(text):
        result = _load("", text)
        assert result.desired is None
        return [str(p) for p in result.problems]

    assert said("liveness: {failure: 2}") == [
        "m.yaml:19: $.spec.liveness.failure: unknown key 'failure' (did you mean 'failures'?)"]
    assert said("liveness: {period: 0s}") == [
        "m.yaml:19: $.spec.liveness.period: must be more than 0 seconds"]
    assert said("liveness: {timeout: 0s, grace: 0s}") == [
        "m.yaml:19: $.spec.liveness.timeout: must be more than 0 seconds"]
    assert said("liveness: {failures: 0}") == [
        "m.yaml:19: $.spec.liveness.failures: must be at least 1"]


def test_liveness_on_a_shared_ollama_role_is_a_warning_not_a_check():
    """Ollama serves many roles from one server it never launches: liveness is ignored, said so."""
    text = textwrap.dedent("""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {name: node}
        spec: {allowed_ports: {from: 8000, to: 12000}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {name: llama}
        spec: {format: ollama, source: {ollama_tag: "llama3:8b"}}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {name: chat}
        spec: {runtime: ollama, mode: managed, model: llama, liveness: {}}
        """)
    result = loader.load([("m.yaml", text.encode())])
    assert result.desired is not None, result.problems
    assert [str(w) for w in result.warnings] == [
        "m.yaml:14: $.spec.liveness: ignored: Ollama serves many roles from one server the "
        "reconciler never launches or restarts"]


def test_no_progress_only_after_the_counter_is_flat_for_a_whole_period():
    """Rule (§4.1): "no progress" fails a check only once the decode counter has been flat
    for a whole period with requests in flight; flat for half a period is no failure."""
    assert _run([(100.0, _busy(50)), (105.0, _busy(50))]).failures == 0
    assert _run([(100.0, _busy(50)), (108.0, _busy(50))]).failures == 0
    assert _run([(100.0, _busy(50)), (110.0, _busy(50))]).failures == 1


def test_the_first_busy_check_after_an_idle_spell_does_not_fail_at_once():
    """Rule (§4.1): an idle server makes all the progress asked of it, so a request arriving
    after a long idle spell with the counter unchanged is not "flat for 95 s": the first busy
    check passes, and the counter is flat only from the last look that saw it idle."""
    idle = [(100.0 + 10 * i, _busy(50, in_flight=0)) for i in range(10)]  # the last at 190
    assert _run(idle + [(195.0, _busy(50))]).failures == 0
    assert _run(idle + [(195.0, _busy(50)), (200.0, _busy(50))]).failures == 1  # 10 s since 190
