"""Reserved and used per device in status rows and metrics (§7.1)."""

from __future__ import annotations

from types import SimpleNamespace

from reconciler.core.decisions import Plan
from reconciler.core.devices import DeviceUse
from reconciler.core.observed import Observed
from reconciler.planner import placement
from reconciler.planner.plan import plan
from reconciler.report import metrics
from tests.plan import golden

GB = 10**9


def _result():
    case = golden.load_all()["devices-over-reservation"]
    (step,) = golden.steps(case, "x")
    p = plan(step.desired, step.observed, step.remembered, step.ctx, step.now)
    return SimpleNamespace(plan=p, desired=step.desired, observed=step.observed, ok=True)


def test_device_table_has_memory_reserved_and_used_per_role() -> None:
    """§7.1/§11 the device table: each device's memory, what each role reserves on it and what its
    server uses."""
    result = _result()
    uses = placement.uses_by_pid(result.observed.device_use)
    table = placement.device_table(result.desired.node, result.plan.decisions, uses)
    assert table == [
        {"device": "cuda:0", "kind": "cuda", "memory": 24 * GB, "reserved": 12 * GB,
         "holders": [{"role": "chat", "reserved": 12 * GB, "used": 13_100_000_000}]},
        {"device": "cuda:1", "kind": "cuda", "memory": 24 * GB, "reserved": 12 * GB,
         "holders": [{"role": "coder", "reserved": 12 * GB, "used": 11 * GB}]},
    ]


def test_metrics_publish_device_memory_reserved_and_used() -> None:
    """§7.1 metrics publish each device's memory, each role's reservation and its observed use, per
    node."""
    text = metrics.render(_result(), None, problems_count=0, last_pass_ts=1.0, duration=0.1,
                          failed=False, node="gpu-1")
    assert 'reconciler_device_memory_bytes{device="cuda:0",node="gpu-1"} 2.4e+10' in text
    assert ('reconciler_device_reserved_bytes{device="cuda:1",node="gpu-1",role="coder"} 1.2e+10'
            in text)
    assert ('reconciler_device_used_bytes{device="cuda:0",node="gpu-1",role="chat"} 1.31e+10'
            in text)
    assert 'reconciler_role_status{node="gpu-1",role="chat",status="degraded"} 1.0' in text


def test_uses_of_one_pid_on_one_device_add_up() -> None:
    """§7.1 several uses reported for one pid on one device add up."""
    uses = placement.uses_by_pid([DeviceUse(pid=1, device="cuda:0", used=1),
                                  DeviceUse(pid=1, device="cuda:0", used=2)])
    assert uses == {1: {"cuda:0": 3}}


def test_a_node_without_devices_publishes_no_device_series() -> None:
    """A node without devices publishes no device series."""
    result = SimpleNamespace(plan=Plan(), desired=None, observed=Observed(), ok=True)
    text = metrics.render(result, None, problems_count=0, last_pass_ts=1.0, duration=0.1,
                          failed=False, node="n")
    assert "reconciler_device_reserved_bytes{" not in text


def test_over_reservation_is_one_event_until_it_changes() -> None:
    """The degraded decision is news once (its why is stable; the numbers are in its detail)."""
    from reconciler.core import events

    d = _result().plan.decision("chat")
    first = events.for_decision(d, None, before=None, after=None, last=None,
                                operator_started=False, git_commit=None, at=1.0)
    assert first is not None and first.reason == "over_reserved"
    assert first.detail == "over its reservation on cuda:0"
    again = events.for_decision(d, None, before=None, after=None, last=first,
                                operator_started=False, git_commit=None, at=2.0)
    assert again is None
