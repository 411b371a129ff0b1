"""The planner's memo of steady drafts (``rungs._STEADY``) never hands out a stale decision.

A role that keeps (in sync, loading, adopted, stopped…) gets the same draft as
its last pass when every field of it is the same: the memo compares each
field ``draft`` sets. Each test plans one world, then the same roles with one
thing changed (a probe's detail, the record's reservation, devices or
restart count, the clock), in one process (the memo warm), and compares the
plan with the one a fresh planner (``plan.forget``) gives.
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.decisions import Reason, Verb
from reconciler.core.desired import (Desired, MemorySpec, Mode, NodeConfig, RoleSpec, Runtime,
                                      ServeSpec)
from reconciler.core.observed import (
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    ServerProcess,
    Terminal,
    flat_record,
)
from reconciler.planner import identity
from reconciler.planner.plan import forget, plan
from tests.plan.worlds import CTX, NOW, SERVE_PROGRAMS, World, launch_of, worlds
from tests.support.worlds import GB, QWEN

NODE = NodeConfig(serve_programs=SERVE_PROGRAMS)

ROLE = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                serve=ServeSpec(port=8080))


def _plan(w: World):
    return plan(w.desired, w.observed, w.remembered, w.ctx, w.now)


def _fresh(w: World):
    forget()
    return _plan(w)


def assert_no_stale_draft(first: World, second: World) -> None:
    _fresh(first)
    warm = _plan(second)  # the memo holds the drafts ``first`` kept
    assert warm == _fresh(second)


def _in_sync(detail: str = "", reserved: int = 2 * GB, restarts: int = 0,
             devices: tuple = (), now: float = NOW, role: RoleSpec = ROLE) -> World:
    """One server of ours, alive and answering: a keep, in sync."""
    launch = launch_of(role, NODE)
    rec = flat_record(name=role.name, instance_id=identity.instance_id(role),
                      runtime=role.runtime, mode=role.mode, port=role.serve.port,
                      pid=4242, create_time=1.0, launch_digest=launch.digest,
                      launch_argv=launch.argv, healthy_since=900.0, restarts=restarts,
                      reserved=reserved, devices=devices)
    obs = RoleObservation(name=role.name,
                          process=ProcessFacts(pid=4242, create_time=1.0, alive=True, owned=True),
                          probe=ProbeFacts(health=Health.UP, detail=detail))
    return World(desired=Desired(roles=(role,), models=(QWEN,), node=NODE),
                 observed=Observed(roles=(obs,)), remembered=Remembered(roles=(rec,)),
                 ctx=CTX, now=now)


def test_the_same_world_twice_hands_out_the_same_decision() -> None:
    """Sanity: a role in sync keeps, and a second pass of the same world gives the very same
    (frozen) decision, equal to a fresh planner's."""
    w = _in_sync()
    first = _fresh(w).decisions[0]
    assert (first.verb, first.reason) == (Verb.KEEP, Reason.IN_SYNC)
    again = _plan(w).decisions[0]
    assert again is first
    assert _plan(w) == _fresh(w)


def test_a_kept_decision_follows_the_probes_detail() -> None:
    """The detail a status shows is the probe's of this pass, not the last one's."""
    assert_no_stale_draft(_in_sync(detail="up"), _in_sync(detail="up; 3 slots busy"))
    assert _plan(_in_sync(detail="slow")).decisions[0].detail == "slow"


def test_a_kept_decision_follows_the_records_reservation_devices_and_count() -> None:
    """§7 what a kept role holds (its draft's ``holds``, §7.1 its devices) and §4 its restart
    count are this pass's record's."""
    base = _in_sync()
    for changed in (_in_sync(reserved=3 * GB), _in_sync(restarts=2),
                    _in_sync(devices=(("cuda:0", GB),))):
        assert_no_stale_draft(base, changed)
        assert_no_stale_draft(changed, base)


def test_a_kept_decision_follows_its_process() -> None:
    """A new pid (the role's server replaced outside this pass) is a new ``Keep``."""
    w = _in_sync()
    other = attrs.evolve(w, observed=Observed(roles=(attrs.evolve(
        w.observed.roles[0], process=ProcessFacts(pid=4343, create_time=2.0, alive=True,
                                                  owned=True)),)),
        remembered=Remembered(roles=(attrs.evolve(
            w.remembered.roles[0], process=ServerProcess(pid=4343, create_time=2.0)),)))
    assert_no_stale_draft(w, other)
    assert _plan(other).decisions[0].pid == 4343


def test_what_a_kept_role_holds_is_this_passs_reservation() -> None:
    """§7 a kept role holds its record's reservation of this pass: when it shrank, a start
    that did not fit beside it fits now (a stale draft would hold the old bytes)."""
    big, small = _in_sync(reserved=8 * GB), _in_sync(reserved=2 * GB)
    other = attrs.evolve(ROLE, name="next", serve=ServeSpec(port=8081),
                         memory=MemorySpec(weights=4 * GB))
    node = attrs.evolve(NODE, memory_budget=10 * GB)

    def beside(w: World) -> World:
        return attrs.evolve(w, desired=attrs.evolve(w.desired, roles=(ROLE, other), node=node))

    assert_no_stale_draft(beside(big), beside(small))
    verbs = {d.role: d.verb for d in _plan(beside(small)).decisions}
    assert verbs == {"chat": Verb.KEEP, "next": Verb.START}
    assert {d.role: d.verb for d in _fresh(beside(big)).decisions}["next"] is Verb.REFUSE


def test_a_kept_adopted_roles_status_follows_its_probe() -> None:
    """§1.2 an adopted role's status is its probe's of this pass (same reason, same detail)."""
    adopted = attrs.evolve(ROLE, mode=Mode.ADOPTED)

    def probed(health: Health) -> World:
        obs = RoleObservation(name="chat", probe=ProbeFacts(health=health, detail="busy"))
        return World(desired=Desired(roles=(adopted,), models=(QWEN,), node=NODE),
                     observed=Observed(roles=(obs,)), remembered=Remembered(), ctx=CTX)

    assert_no_stale_draft(probed(Health.UP), probed(Health.UNHEALTHY))
    first, second = _fresh(probed(Health.UP)).decisions[0], _plan(probed(Health.UNHEALTHY)).decisions[0]
    assert (first.reason, first.detail) == (second.reason, second.detail)
    assert first.status is not second.status


@st.composite
def _changed(draw, w: World) -> World:
    """The same roles, a pass later: probes, records, the clock (and, sometimes, every role's
    port) drawn again."""
    observations = tuple(
        attrs.evolve(o, probe=attrs.evolve(o.probe, detail=draw(st.sampled_from(["", "up", "busy"])),
                                           health=draw(st.sampled_from(list(Health))))
                     if o.probe is not None else o.probe)
        for o in w.observed.roles)
    records = tuple(
        attrs.evolve(r, restarts=draw(st.sampled_from([r.restarts, 0, 3])),
                     reserved=draw(st.sampled_from([r.reserved, 0, r.reserved + GB])),
                     devices=draw(st.sampled_from([r.devices, (("cuda:0", GB),)])),
                     terminal=draw(st.sampled_from([r.terminal, None, Terminal.GAVE_UP])))
        for r in w.remembered.roles)
    desired = w.desired
    if draw(st.booleans()):  # every role moved (ports stay apart, as validate wants)
        desired = attrs.evolve(desired, roles=tuple(
            attrs.evolve(spec, serve=attrs.evolve(spec.serve, port=spec.serve.port + 1000))
            for spec in desired.roles))
    return attrs.evolve(w, desired=desired,
                        observed=attrs.evolve(w.observed, roles=observations),
                        remembered=Remembered(roles=records),
                        now=draw(st.sampled_from([w.now, w.now + 30.0])))


@settings(max_examples=80)
@given(worlds(), st.data())
def test_any_world_then_the_same_roles_changed_plans_as_a_fresh_planner(first, data) -> None:
    """Property: a world, then its roles a pass later with their probes, records and clock
    changed, plans as a fresh planner does (and back again)."""
    second = data.draw(_changed(first))
    assert_no_stale_draft(first, second)
    assert_no_stale_draft(second, first)
