"""Properties of device placement (§7.1), over worlds the real planner drives.

Each test starts from nothing, plans, applies the plan with ``simulate`` (the
real record rules), and plans again, checking the device rules at every step:
no device ever over its memory, a running role never moved by another's
claim, the same inputs give the same assignment, eviction frees only what
the claim needs.
"""

from __future__ import annotations

import random
from collections import defaultdict

import attrs
from hypothesis import given, strategies as st

from reconciler.core.decisions import Plan, Verb
from reconciler.core.demand import Demand, RoleDemand
from reconciler.core.observed import Observed, Remembered
from reconciler.planner.plan import plan
from tests.devices.worlds import CTX, desireds
from tests.plan.simulate import simulate

RESIDENT = (Verb.START, Verb.RESTART)


def _run(desired, observed, remembered, now) -> Plan:
    return plan(desired, observed, remembered, CTX, now)


def _per_device(p: Plan) -> dict[str, int]:
    """Bytes on each device once the plan is done: what stays held, and what is claimed."""
    out: dict[str, int] = defaultdict(int)
    for d in p.decisions:
        if d.verb in (Verb.STOP, Verb.REFUSE, Verb.FORGET, Verb.GIVE_UP):
            continue
        for device, size in d.devices:
            out[device] += size
    return out


def _drive(desired, passes: int, demand=None):
    """Plan and apply ``passes`` times; yields (plan, observed, remembered) before each apply."""
    observed, remembered, now = Observed(demand=demand), Remembered(), 1000.0
    for _ in range(passes):
        p = _run(desired, observed, remembered, now)
        yield p, observed, remembered
        observed, remembered = simulate(p, desired, observed, remembered, now)
        observed = attrs.evolve(observed, demand=demand)
        now += 10


@given(desireds(on_demand=False))
def test_no_device_is_ever_planned_over_its_memory(desired) -> None:
    """Property §7.1: over passes of any fleet, no device is ever planned to hold more than its
    memory."""
    capacity = {d.id: d.memory for d in desired.node.devices}
    for p, _, _ in _drive(desired, 3):
        for device, used in _per_device(p).items():
            assert used <= capacity[device], (device, p)


@given(desireds(on_demand=False), st.data())
def test_a_running_role_is_never_moved_by_another_roles_claim(desired, data) -> None:
    """Start the world, then add roles: every role that was running keeps its devices."""
    steps = list(_drive(desired, 2))
    p, observed, remembered = steps[-1]
    observed, remembered = simulate(p, desired, observed, remembered, 1010.0)
    before = {r.name: r.devices for r in remembered.roles if r.pid is not None}
    # Another role arrives wanting devices (any request): it may only take free memory.
    extra = attrs.evolve(desired.roles[0], name="zz", serve=attrs.evolve(
        desired.roles[0].serve, port=8099), state=desired.roles[0].state.RUNNING)
    grown = attrs.evolve(desired, roles=(*desired.roles, extra))
    after = _run(grown, observed, remembered, 1020.0)
    for name, devices in before.items():
        d = after.decision(name)
        assert d is not None and d.verb is Verb.KEEP, d
        assert d.devices == devices, (name, d)


@given(desireds(on_demand=False))
def test_the_same_inputs_give_the_same_assignment(desired) -> None:
    """Twice, and with the roles and records in another order: the same plan."""
    for p, observed, remembered in _drive(desired, 2):
        shuffled = list(desired.roles)
        random.Random(len(shuffled)).shuffle(shuffled)
        again = _run(attrs.evolve(desired, roles=tuple(shuffled)), observed,
                     Remembered(roles=tuple(reversed(remembered.roles))), 1000.0 + 0)
        first = _run(desired, observed, remembered, 1000.0)
        assert [(d.role, d.verb, d.devices) for d in first.decisions] == \
            [(d.role, d.verb, d.devices) for d in again.decisions]


@given(desireds(on_demand=False))
def test_a_placed_world_settles_with_no_restart(desired) -> None:
    """The launch built from a placement is the launch the next pass expects: no restart loop."""
    plans = [p for p, _, _ in _drive(desired, 3)]
    assert not [d for d in plans[-1].decisions if d.verb is Verb.RESTART], plans[-1]
    assert not [d for d in plans[-2].decisions if d.verb is Verb.RESTART], plans[-2]


@given(st.one_of(desireds(on_demand=True), desireds(only_on_demand=True)), st.data())
def test_eviction_frees_only_what_the_claim_needs(desired, data) -> None:
    """Every on-demand role stopped for a claim held memory on a device the claim got."""
    names = [r.name for r in desired.roles if r.on_demand]
    # First every on-demand role is asked for once, then only one of them.
    first = Demand(roles=tuple(RoleDemand(role=n, waiting=1, last_request=900.0 + i)
                               for i, n in enumerate(names)), since=0.0)
    steps = list(_drive(desired, 2, demand=first))
    p, observed, remembered = steps[-1]
    observed, remembered = simulate(p, desired, observed, remembered, 1010.0)
    if not names:
        return
    wanted = data.draw(st.sampled_from(names))
    later = Demand(roles=tuple(RoleDemand(role=n, waiting=1 if n == wanted else 0,
                                          last_request=990.0 if n == wanted else 900.0 + i)
                               for i, n in enumerate(names)), since=0.0)
    result = _run(desired, attrs.evolve(observed, demand=later), remembered, 1020.0)
    held = {r.name: {device for device, _ in r.devices} for r in remembered.roles}
    for d in result.decisions:
        if d.verb is Verb.STOP and d.reason == "evicted":
            claim = result.decision(d.why.removeprefix("for "))  # the claim it made room for
            got = {device for device, _ in claim.devices}
            assert claim.verb in RESIDENT and held.get(d.role, set()) & got, (d, claim)
