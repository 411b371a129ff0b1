"""Properties of instances (§12) over worlds the real planner drives (plan + simulate).

Devices: two instances of one role never share a device unless the role allows it, and no
device is ever planned over its memory, whatever the roles, counts and device sizes. Rolling
update: over any sequence of passes (restarted servers that answer late, or die), a group
never has more than one instance away for its new generation.
"""

from __future__ import annotations

from collections import defaultdict

import attrs
from hypothesis import given, settings, strategies as st

from reconciler.core.decisions import Plan, Reason, Status, Verb
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    NodeConfig,
    Runtime,
    sorted_by_name,
)
from reconciler.core.instances import instances
from reconciler.core.observed import Observed, Remembered
from reconciler.planner.plan import plan
from tests.devices.worlds import CTX, MODEL, desireds
from tests.plan.simulate import simulate
from tests.support.worlds import GB, role

GONE = (Verb.STOP, Verb.REFUSE, Verb.FORGET, Verb.GIVE_UP)
NODE = NodeConfig(name="n", serve_programs=((Runtime.LLAMACPP, "/opt/llama-server"),))


@st.composite
def grouped(draw) -> Desired:
    """``desireds``' roles, each with 1–3 replicas (some sharing devices), on spaced ports."""
    desired = draw(desireds(on_demand=False))
    roles = []
    for i, r in enumerate(desired.roles):
        spec = attrs.evolve(r, serve=attrs.evolve(r.serve, port=8100 + 10 * i),
                            replicas=draw(st.integers(1, 3)),
                            shared_by_replicas=draw(st.booleans()) and draw(st.booleans()))
        roles += instances(spec)
    return attrs.evolve(desired, roles=sorted_by_name(roles))


def _drive(desired: Desired, passes: int):
    observed, remembered, now = Observed(), Remembered(), 1000.0
    for _ in range(passes):
        p = plan(desired, observed, remembered, CTX, now)
        yield p
        observed, remembered = simulate(p, desired, observed, remembered, now)
        now += 10


@settings(max_examples=60, deadline=None)
@given(grouped())
def test_instances_of_a_role_never_share_a_device_and_no_device_overflows(desired) -> None:
    """Property §12/§7.1: after every pass's plan, no device holds two instances of one role
    (unless shared_by_replicas), and no device is planned over its memory."""
    capacity = {d.id: d.memory for d in desired.node.devices}
    shared = {r.name for r in desired.roles if r.shared_by_replicas}
    for p in _drive(desired, 3):
        used: dict[str, int] = defaultdict(int)
        groups: dict[str, list[str]] = defaultdict(list)
        for d in p.decisions:
            if d.verb in GONE:
                continue
            for device, size in d.devices:
                used[device] += size
                if d.role not in shared:
                    groups[device].append(d.role.split("/")[0])
        for device, size in used.items():
            assert size <= capacity[device], (device, p)
        for device, names in groups.items():
            assert len(names) == len(set(names)), (device, names, p)


def _away(p: Plan, group: list[str]) -> list[str]:
    """Instances of ``group`` this plan leaves not serving: restarted now, or not answering."""
    out = []
    for name in group:
        d = p.decision(name)
        assert d is not None
        serving = (d.verb is Verb.KEEP and d.status is Status.RUNNING) or (
            d.verb is Verb.WAIT and d.reason is Reason.ROLLING_UPDATE)
        if not serving:
            out.append(name)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.data())
def test_a_rolling_update_never_has_two_instances_away(n, data) -> None:
    """Property §12: once a group of N runs in sync, a new generation never has more than
    one of its instances away in any pass — whether restarted servers answer at once, late,
    or die (then the rollout stops there, the others still serving the old generation)."""
    base = role("chat", 8091, memory=MemorySpec(weights=GB))
    desired = Desired(roles=instances(attrs.evolve(base, replicas=n)), models=(MODEL,),
                      node=NODE)
    names = [r.name for r in desired.roles]
    observed, remembered, now = Observed(), Remembered(), 1000.0
    for _ in range(3):  # everything starts and answers
        p = plan(desired, observed, remembered, CTX, now)
        observed, remembered = simulate(p, desired, observed, remembered, now)
        now += 10
    assert all(d.verb is Verb.KEEP for d in plan(desired, observed, remembered, CTX, now).decisions)
    new = attrs.evolve(desired, roles=tuple(attrs.evolve(r, restarted_at="v2")
                                            for r in desired.roles))
    for _ in range(3 * n + 6):
        p = plan(new, observed, remembered, CTX, now)
        restarting = [d.role for d in p.decisions
                      if d.verb is Verb.RESTART and d.reason is Reason.SPEC_CHANGED]
        assert len(restarting) <= 1, p
        if restarting:  # the one going away: every other instance serves
            assert _away(p, names) == restarting, p
        failing = frozenset(data.draw(st.sets(st.sampled_from(names), max_size=1)))
        observed, remembered = simulate(p, new, observed, remembered, now, failing)
        late = data.draw(st.booleans())  # a restarted server that does not answer yet
        if late and restarting and restarting[0] not in failing:
            observed = attrs.evolve(observed, roles=tuple(
                attrs.evolve(o, probe=None) if o.name == restarting[0] else o
                for o in observed.roles))
        now += data.draw(st.sampled_from([1.0, 10.0, 100.0]))

