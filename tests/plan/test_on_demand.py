"""Properties of on-demand roles under the planner (BEHAVIOUR §9), over random worlds.

A world here is up to six llama.cpp roles, each always-on or on-demand, each
running (in sync, holding its footprint) or not, with the router's demand for
each: requests waiting, in flight, and when the last one arrived. The
budget always holds what runs when the pass begins.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from reconciler.core import demand as demands
from reconciler.core.decisions import PlanContext, Reason, Verb
from reconciler.core.demand import Demand, RoleDemand
from reconciler.core.desired import (
    RouterConfig,
    Desired,
    MemorySpec,
    Mode,
    NodeConfig,
    RoleSpec,
    Runtime,
    ServeSpec,
    WantedState,
)
from reconciler.core.observed import flat_record
from reconciler.core.observed import (
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
)
from reconciler.planner.plan import plan
from reconciler.planner import identity
from tests.support.worlds import LLAMA_PROGRAM, gguf

GB = 10**9
NOW = 10_000.0
CTX = PlanContext(environ=(("PATH", "/usr/bin"),), data_root="/srv/instances")
MODEL = gguf("qwen", root="/m")
NODE = NodeConfig(serve_programs=LLAMA_PROGRAM)


@attrs.frozen(kw_only=True)
class World:
    desired: Desired
    observed: Observed
    remembered: Remembered


@st.composite
def worlds(draw) -> World:
    count = draw(st.integers(1, 6))
    names = [f"r{i}" for i in range(count)]
    roles, obs, records, demand = [], [], [], []
    held = 0
    for i, name in enumerate(names):
        size = draw(st.integers(1, 8)) * GB
        on_demand = draw(st.booleans())
        spec = RoleSpec(name=name, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                        state=WantedState.ON_DEMAND if on_demand else WantedState.RUNNING,
                        serve=ServeSpec(port=8080 + i), memory=MemorySpec(weights=size),
                        idle_after=float(draw(st.sampled_from([60, 600]))))
        roles.append(spec)
        if draw(st.booleans()):  # running, in sync, holding its footprint
            held += size
            launch = identity.launch(spec, {"qwen": MODEL}, NODE, dict(CTX.environ),
                                     CTX.data_root)
            assert launch is not None
            records.append(flat_record(
                name=name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
                mode=spec.mode, port=spec.serve.port, pid=100 + i, create_time=1.0,
                launch_digest=launch.digest, launch_argv=launch.argv, reserved=size,
                started_at=draw(st.floats(NOW - 2000, NOW)), healthy_since=NOW - 1))
            obs.append(RoleObservation(
                name=name, process=ProcessFacts(pid=100 + i, create_time=1.0, alive=True,
                                                owned=True),
                probe=ProbeFacts(health=Health.UP)))
        demand.append(RoleDemand(
            role=name, waiting=draw(st.integers(0, 3)), in_flight=draw(st.integers(0, 2)),
            last_request=draw(st.none() | st.floats(NOW - 2000, NOW))))
    budget = held + draw(st.integers(0, 8)) * GB
    node = attrs.evolve(NODE, memory_budget=budget)
    return World(desired=Desired(roles=tuple(roles), models=(MODEL,), node=node),
                  observed=Observed(roles=tuple(obs), demand=Demand(roles=tuple(demand))),
                  remembered=Remembered(roles=tuple(records)))


def _run(w: World):
    return plan(w.desired, w.observed, w.remembered, CTX, NOW)


def _last_used(w: World, name: str) -> float:
    record = w.remembered.role(name)
    return demands.last_used(w.observed.demand.of(name),
                             record.started_at if record is not None else None)


@given(worlds())
def test_an_on_demand_role_without_waiting_requests_never_starts(w: World) -> None:
    """No start or restart of an on-demand role that has no request waiting."""
    for d in _run(w).decisions:
        spec = w.desired.role(d.role)
        if spec.on_demand and d.verb in (Verb.START, Verb.RESTART):
            assert w.observed.demand.of(d.role).waiting > 0, d


def _evictable(w: World, name: str) -> bool:
    """§9 nobody waits for it to be ready, and it has run min_residency (in flight: drained)."""
    record = w.remembered.role(name)
    return demands.evictable(w.observed.demand.of(name), record.started_at if record else None,
                             RouterConfig().min_residency, NOW)


@given(worlds())
def test_only_idle_on_demand_roles_are_evicted_or_stopped_idle(w: World) -> None:
    """Never stop an always-on role for another role or for idleness; never one busy for
    idleness; never one with requests waiting for it, or resident less than min_residency,
    for another role."""
    for d in _run(w).decisions:
        if d.verb is Verb.STOP:
            assert d.reason in (Reason.EVICTED, Reason.IDLE), d
            assert w.desired.role(d.role).on_demand, d
            if d.reason is Reason.IDLE:
                assert not w.observed.demand.of(d.role).busy, d
            else:
                assert _evictable(w, d.role), d


@given(worlds())
def test_the_ledger_never_exceeds_the_budget(w: World) -> None:
    """After the pass, what the roles hold (reserved − released + reserved anew) fits."""
    p = _run(w)
    records = {r.name: r for r in w.remembered.roles}
    after = sum((records[d.role].reserved if d.role in records else 0) - d.release + d.reserve
                for d in p.decisions)
    assert after <= w.desired.node.memory_budget


@given(worlds())
def test_eviction_takes_the_least_recently_used_first(w: World) -> None:
    """An evicted role was used no later than any idle on-demand role left running."""
    p = _run(w)
    evicted = [d.role for d in p.decisions if d.reason is Reason.EVICTED]
    kept_idle = [d.role for d in p.decisions
                 if d.verb is Verb.KEEP and w.desired.role(d.role).on_demand
                 and w.remembered.role(d.role) is not None and _evictable(w, d.role)]
    for gone in evicted:
        for kept in kept_idle:
            assert (_last_used(w, gone), gone) < (_last_used(w, kept), kept), (gone, kept)


@given(worlds())
def test_every_evicted_role_made_room_for_a_claim_that_was_placed(w: World) -> None:
    """Eviction is never in vain: the role it was for starts in the same pass."""
    p = _run(w)
    for d in p.decisions:
        if d.reason is Reason.EVICTED:
            claimant = p.decision(d.why.removeprefix("for "))
            assert claimant is not None and claimant.verb in (Verb.START, Verb.RESTART), d


@given(worlds())
def test_a_role_idle_for_idle_after_is_stopped(w: World) -> None:
    """A running on-demand role with no request for idle_after (and none busy) stops."""
    p = _run(w)
    for d in p.decisions:
        spec = w.desired.role(d.role)
        seen = w.observed.demand.of(d.role)
        running = w.remembered.role(d.role) is not None
        if spec.on_demand and running and not seen.busy and \
                NOW - _last_used(w, d.role) >= spec.idle_after:
            assert (d.verb, d.reason) == (Verb.STOP, Reason.IDLE), d
        elif d.reason is Reason.IDLE:
            raise AssertionError(f"stopped as idle too early: {d}")
