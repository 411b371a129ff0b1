"""Properties of the planner's liveness rung (§4.1): what it never does, whatever the counters."""

from __future__ import annotations

from hypothesis import given, strategies as st

from reconciler.core.decisions import Reason, Verb
from reconciler.planner.plan import plan
from tests.plan import golden

NOW = 1000.0


@st.composite
def cases(draw):
    mode = draw(st.sampled_from(["managed", "adopted"]))
    period = draw(st.sampled_from([1.0, 10.0, 30.0]))
    failures = draw(st.integers(1, 4))
    grace = draw(st.sampled_from([0.0, 60.0, 600.0]))
    decoded = draw(st.sampled_from([None, 100.0]))
    counters = {"failures": draw(st.integers(0, 5)),
                "since": NOW - draw(st.sampled_from([0.0, 5.0, 50.0, 500.0])),
                "checked_at": NOW - draw(st.sampled_from([0.0, 0.5, 9.0, 30.0])),
                "detail": "x", "decoded": decoded,
                "decoded_at": NOW - draw(st.sampled_from([0.0, 5.0, 100.0]))}
    if counters["failures"] == 0:
        counters.update(since=None, checked_at=None)
    probe = draw(st.sampled_from(["hung", "refused", "moving", "flat", "idle", "up"]))
    observed = {
        "hung": {"health": "unreachable", "timed_out": True, "detail": "no answer"},
        "refused": {"health": "unreachable", "detail": "connection refused"},
        "moving": {"health": "up", "progress": {"in_flight": 2, "decoded": 101.0}},
        "flat": {"health": "up", "progress": {"in_flight": 2, "decoded": 100.0}},
        "idle": {"health": "up", "progress": {"in_flight": 0, "decoded": 100.0}},
        "up": {"health": "up"},
    }[probe]
    started = NOW - draw(st.sampled_from([1.0, 100.0, 10000.0]))
    role = {"port": 8090, "mode": mode, "extra_args": ["--metrics"],
            "liveness": {"period": period, "timeout": 1.0, "failures": failures, "grace": grace}}
    remembered = {"liveness": counters, "restarts": draw(st.integers(0, 6)),
                  "healthy_since": draw(st.sampled_from([None, started + 1]))}
    if mode == "managed":
        observed = {"pid": 100, **observed}
        remembered.update(pid=100, started_at=started)
    else:
        remembered["mode"] = "adopted"
        observed = {**observed, "port_taken": probe == "hung"}
    case = {"roles": {"chat": role}, "observed": {"roles": {"chat": observed}},
            "remembered": {"chat": remembered}, "now": NOW}
    (step,) = golden.steps(case, "property")
    return step, probe, started, grace


@given(cases())
def test_the_liveness_rung_never_acts_wrongly(case):
    """Adopted: never an action; a moving or idle server, or one in grace: no restart; a refused
    look neither fails nor passes a check (only failures already counted can restart it)."""
    step, probe, started, grace = case
    decision = plan(step.desired, step.observed, step.remembered, step.ctx, step.now).decision("chat")
    if step.desired.role("chat").managed is False:
        assert decision.verb is Verb.KEEP
        return
    unresponsive = decision.reason is Reason.UNRESPONSIVE
    record = step.remembered.role("chat")
    spec = step.desired.role("chat").liveness
    if probe in ("moving", "idle", "up") or NOW - started < grace:
        assert not (unresponsive and decision.verb is Verb.RESTART), decision
    if probe == "refused" and decision.verb is Verb.RESTART and unresponsive:
        assert record.liveness.failures >= spec.failures
    if decision.verb is Verb.RESTART and unresponsive:
        assert decision.restarts == record.restarts + 1
        assert record.restarts < step.desired.role("chat").restart.max_restarts
