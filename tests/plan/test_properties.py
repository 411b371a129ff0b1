"""Hypothesis properties of plan(): determinism, convergence, safety, the ledger, backoff."""

from __future__ import annotations

import functools
import ipaddress

import attrs
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from reconciler.planner import identity, policy, render
from reconciler.core.decisions import Plan, Reason, Status, Verb
from reconciler.core.desired import (
    Desired,
    Mode,
    NodeConfig,
    RestartPolicy,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import (
    Health,
    ModelCheck,
    ModelState,
    Observed,
    Orphan,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
    flat_record,
)
from reconciler.planner.plan import plan
from reconciler.runtimes.ollama import SPEC as OLLAMA
from tests.plan.simulate import simulate
from tests.plan.worlds import (
    MODELS,
    MODELS_BY_NAME,
    NOW,
    OLLAMA_PORT,
    SERVE_PROGRAMS,
    World,
    converged,
    desireds,
    exposure_worlds,
    launch_of,
    restart_policies,
    worlds,
)


def run(w: World) -> Plan:
    return plan(w.desired, w.observed, w.remembered, w.ctx, w.now)


def step(w: World, p: Plan) -> World:
    observed, remembered = simulate(p, w.desired, w.observed, w.remembered, w.now)
    return attrs.evolve(w, observed=observed, remembered=remembered,
                        ctx=attrs.evolve(w.ctx, operator_starts=frozenset()))


def check_safety(w: World, p: Plan) -> None:
    """The guards every plan keeps, whatever the world looks like."""
    names = {r.name for r in w.desired.roles} | {r.name for r in w.remembered.roles}
    roles = [d.role for d in p.decisions]
    assert sorted(roles) == sorted(names), "exactly one decision per role"
    node = w.desired.node
    starts = [d for d in p.decisions if d.verb in (Verb.START, Verb.RESTART)]
    for d in starts:
        assert d.port is not None and node.port_allowed(d.port)
        assert not w.observed.role(d.role).port_taken, "never start over a foreign listener"
        assert d.launch is not None
    ports = [d.port for d in starts]
    assert len(ports) == len(set(ports)), "no two starts share a port"
    for d in p.decisions:
        proc = w.observed.role(d.role).process
        if d.pid is not None:
            assert proc is not None and proc.owned and proc.alive and proc.pid == d.pid
        if d.verb in (Verb.STOP,):
            assert d.pid is not None, "a stop always names our owned pid"
        spec, rec = w.desired.role(d.role), w.remembered.role(d.role)
        adopted = spec.mode is Mode.ADOPTED if spec is not None else rec is not None and rec.mode is Mode.ADOPTED
        if adopted:
            ours_exposed = (d.verb is Verb.STOP and d.reason is Reason.EXPOSED
                            and rec is not None and rec.mode is Mode.MANAGED)
            assert not d.acts or ours_exposed, \
                "no action targets an adopted role (but our own exposed server is stopped, §5)"
        if d.verb is Verb.UNLOAD:  # §2: only a load of ours no pass has seen leave /api/ps
            assert rec is not None and rec.we_loaded and rec.exited_at is None
            assert OLLAMA.same(rec.model_tag, d.model_tag)
            probe = w.observed.role(d.role).probe
            assert probe is not None and OLLAMA.lists(probe.resident_models, d.model_tag)


def held_after(w: World) -> int:
    """Bytes the ledger counts after a pass: our reservations plus answering adopted roles."""
    total = sum(r.reserved for r in w.remembered.roles)
    return total


@given(worlds())
def test_plan_is_deterministic_and_order_independent(w: World) -> None:
    """The same inputs in any order give the same plan, decision for decision."""
    first = run(w)
    shuffled = attrs.evolve(
        w,
        desired=attrs.evolve(w.desired, roles=w.desired.roles[::-1], models=w.desired.models[::-1]),
        observed=attrs.evolve(w.observed, roles=w.observed.roles[::-1], models=w.observed.models[::-1]),
        remembered=attrs.evolve(w.remembered, roles=w.remembered.roles[::-1]),
    )
    assert run(shuffled) == first == run(w)
    assert render.text(run(shuffled)) == render.text(first)


@given(desireds())
def test_converged_world_plans_nothing(desired: Desired) -> None:
    """A world already matching the manifests gets no acting decision."""
    p = run(converged(desired))
    assert p.changes == (), render.text(p)


@given(worlds())
def test_plan_simulate_converges_within_two_passes(w: World) -> None:
    """Without faults, two applied passes leave nothing to do."""
    for _ in range(2):
        w = step(w, run(w))
    p = run(w)
    assert p.changes == (), render.text(p)


#: The risky branches generated worlds must reach (see --hypothesis-show-statistics).
RISKY = {(Verb.UNLOAD, None), (Verb.LOAD, Reason.EVICTED), (Verb.RESTART, Reason.SPEC_CHANGED),
         (Verb.RESTART, Reason.CRASHED), (Verb.REFUSE, None), (Verb.GIVE_UP, None),
         (Verb.STOP, None)}


@given(worlds(min_roles=0))
def test_safety_guards_hold(w: World) -> None:
    """Ports, ownership and adoption guards hold in every plan."""
    p = run(w)
    for d in p.decisions:
        if (d.verb, d.reason) in RISKY or (d.verb, None) in RISKY:
            event(f"plans {d.verb} ({d.reason})")
    check_safety(w, p)


@given(worlds(), st.data())
def test_edits_that_keep_the_launch_never_restart(w: World, data: st.DataObject) -> None:
    """Memory figures, excludes and restart policy are not part of the launch: never a restart."""
    roles = []
    for r in w.desired.roles:
        roles.append(attrs.evolve(
            r,
            memory=attrs.evolve(r.memory, kv=r.memory.kv + data.draw(st.integers(0, 3)) * 10**9),
            excludes=frozenset(data.draw(st.lists(st.sampled_from("abcde"), max_size=2))) - {r.name},
            restart=attrs.evolve(r.restart, stable_after=r.restart.stable_after + 1),
        ))
    edited = attrs.evolve(w, desired=attrs.evolve(w.desired, roles=tuple(roles)))
    in_sync = set()
    for old, new in zip(w.desired.roles, roles):
        launch = launch_of(old, w.desired.node) if old.managed else None
        assert launch == (launch_of(new, w.desired.node) if new.managed else None)
        rec = w.remembered.role(old.name)
        if launch is not None and rec is not None and rec.launch_digest == launch.digest:
            in_sync.add(old.name)
    for p in (run(w), run(edited)):
        restarted = {d.role for d in p.decisions if d.reason is Reason.SPEC_CHANGED}
        assert not restarted & in_sync


@given(worlds())
def test_at_most_one_restart_per_role_and_counts_bounded(w: World) -> None:
    """One decision per role, so at most one restart; a crash restart counts exactly one."""
    p = run(w)
    assert len({d.role for d in p.decisions}) == len(p.decisions)
    for d in p.decisions:
        if d.reason in (Reason.CRASHED, Reason.EVICTED) and d.acts:
            rec = w.remembered.role(d.role)
            spec = w.desired.role(d.role)
            assert rec is not None and spec is not None
            assert d.restarts <= spec.restart.max_restarts
            assert d.restarts in (rec.restarts + 1, 1)  # 1 after a stable_after reset


@given(worlds())
def test_reservations_never_exceed_the_budget(w: World) -> None:
    """Whenever a pass places a new reservation, what is held afterwards fits the budget."""
    p = run(w)
    budget = w.desired.node.memory_budget
    claims = [d for d in p.decisions if d.verb in (Verb.START, Verb.RESTART, Verb.LOAD)]
    after = step(w, p)
    if budget is not None and claims:
        adopted = sum(r.memory.footprint for r in w.desired.roles
                      if r.mode is Mode.ADOPTED and p.decision(r.name).status is Status.RUNNING
                      and r.runtime is not Runtime.OLLAMA)
        assert held_after(after) + adopted <= budget
    for d in p.decisions:
        assert d.reserve >= 0 and d.release >= 0


def residents(w: World) -> set[str]:
    """Roles using memory in a world: our live servers, answering adopted roles, and
    every wanted Ollama role whose model the server holds (one model is the
    residency of every role that names it, whoever loaded it)."""
    out = set()
    for spec in w.desired.roles:
        o = w.observed.role(spec.name)
        up = o.probe is not None and o.probe.health is Health.UP
        if spec.runtime is Runtime.OLLAMA:
            tag = MODELS_BY_NAME[spec.model].ollama_tag if spec.model else None
            if spec.wanted and up and OLLAMA.lists(o.probe.resident_models, tag):
                out.add(spec.name)  # (a stopped role serves nothing, whatever stays loaded)
        elif spec.mode is Mode.ADOPTED:  # known only through its probe; forgotten when stopped
            if spec.wanted and up:
                out.add(spec.name)
        elif o.process is not None and o.process.owned and o.process.alive:
            out.add(spec.name)
    return out


def shared_tag_world() -> World:
    """Round 1's failure, shrunk: managed e loads llama3:8b, which adopted d serves too; e excludes d."""
    probe = ProbeFacts(health=Health.UP, listed_models=("llama3:8b",))
    role = functools.partial(RoleSpec, runtime=Runtime.OLLAMA, model="llama3",
                             serve=ServeSpec(port=OLLAMA_PORT), keep_alive=300.0)
    desired = Desired(models=MODELS, node=NodeConfig(serve_programs=SERVE_PROGRAMS), roles=(
        role(name="d", mode=Mode.ADOPTED), role(name="e", mode=Mode.MANAGED,
                                                excludes=frozenset({"d"}))))
    checks = tuple(ModelCheck(name=m.name, state=ModelState.VERIFIED) for m in MODELS)
    observed = Observed(roles=(RoleObservation(name="d", probe=probe),
                               RoleObservation(name="e", probe=probe)), models=checks)
    return World(desired=desired, observed=observed, remembered=Remembered())


def tag_changed_to_resident_world() -> World:
    """Issue 17's planner defect: chat's tag changes to one already resident (loaded for a
    stopped role); its old tag unloads; coder excludes chat and must not start beside it."""
    from pathlib import Path

    import yaml

    from tests.plan import golden

    case = yaml.safe_load((Path(__file__).parent / "golden" /
                           "ollama-tag-changed-to-resident.yaml").read_text())
    [s] = golden.steps(case, "tag-changed-to-resident")
    return World(desired=s.desired, observed=s.observed, remembered=s.remembered, ctx=s.ctx,
                 now=s.now)


@given(worlds())
@example(shared_tag_world())
@example(tag_changed_to_resident_world())
def test_a_placed_claim_never_sits_beside_an_exclusion(w: World) -> None:
    """After a pass, a role we just started/loaded shares residency with nobody it excludes or who excludes it."""
    p = run(w)
    after = residents(step(w, p))
    for d in p.decisions:
        if d.verb not in (Verb.START, Verb.RESTART, Verb.LOAD):
            continue
        mine = w.desired.role(d.role)
        assert mine is not None
        for other in after - {d.role}:
            spec = w.desired.role(other)
            assert other not in mine.excludes and (spec is None or d.role not in spec.excludes)


@given(
    st.integers(0, 40),
    st.integers(0, 40),
    st.floats(0.001, 100),
    st.floats(0.001, 1000),
)
def test_delays_are_monotone_and_capped(a: int, b: int, base: float, cap: float) -> None:
    """delay() never decreases with the attempt and never exceeds the cap."""
    pol = RestartPolicy(base=base, cap=cap)
    lo, hi = sorted((a, b))
    assert policy.delay(lo, pol) <= policy.delay(hi, pol) <= cap


def test_delay_sequence_matches_behaviour() -> None:
    """Defaults give 2, 4, 8, 16, 32, 60, 60 … seconds (BEHAVIOUR §4)."""
    assert [policy.delay(n, RestartPolicy()) for n in range(7)] == [2, 4, 8, 16, 32, 60, 60]
    assert policy.delay(100, RestartPolicy(base=1, cap=10**9)) == 2**16


@given(
    restarts=st.integers(0, 6),
    policy_=restart_policies(),
    since_exit=st.floats(0, 200),
    owned_but_dead=st.booleans(),
)
def test_a_crash_restart_counts_exactly_one(
    restarts: int, policy_: RestartPolicy, since_exit: float, owned_but_dead: bool
) -> None:
    """A dead server gives up at max_restarts, waits out delay(n), else restarts as n + 1."""
    desired = Desired(models=MODELS, node=NodeConfig(serve_programs=SERVE_PROGRAMS), roles=(
        RoleSpec(name="a", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                 serve=ServeSpec(port=8080), restart=policy_),))
    spec = desired.roles[0]
    exited = NOW - since_exit
    proc = ProcessFacts(pid=7, create_time=1.0, alive=not owned_but_dead, owned=owned_but_dead)
    w = World(
        desired=desired,
        observed=Observed(roles=(RoleObservation(name="a", process=proc),)),
        remembered=Remembered(roles=(flat_record(
            name="a", instance_id=identity.instance_id(spec), runtime=spec.runtime,
            mode=spec.mode, port=8080, pid=7, restarts=restarts, exited_at=exited),)),
    )
    d = run(w).decisions[0]
    assert d.pid is None
    wait = min(policy_.base * 2 ** restarts, policy_.cap)  # BEHAVIOUR §4, written out
    if restarts >= policy_.max_restarts:
        assert (d.verb, d.restarts) == (Verb.GIVE_UP, restarts)
    elif exited + wait - NOW > 0:  # since_exit < delay, in floats
        assert (d.verb, d.restarts) == (Verb.WAIT, restarts)
        assert d.retry_in == exited + wait - NOW
    else:
        assert (d.verb, d.reason, d.restarts) == (Verb.RESTART, Reason.CRASHED, restarts + 1)


@pytest.mark.parametrize("health", list(Health))
def test_only_a_server_that_answers_up_counts_as_answering(health) -> None:
    """Rule (§4 restart counting): only `up` is answering for stable_after; an unhealthy,
    loading or unreachable server never wins its restart count back."""
    from reconciler.core.desired import RestartPolicy
    from reconciler.core.observed import RoleRecord
    from reconciler.planner import policy

    assert policy.answering(health) is (health is Health.UP)
    record = flat_record(name="a", instance_id="a-1", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
                        port=8090, restarts=2, healthy_since=0.0)
    count = policy.restart_count(record, RestartPolicy(stable_after=60), 1000.0,
                                 answering=policy.answering(health), operator_start=False)
    assert count == (0 if health is Health.UP else 2)


def _loopback_oracle(address: str) -> bool:
    """Is ``host:port`` (``[v6]:port``) a loopback listener? Python's own answer, as an oracle."""
    host = address.rsplit(":", 1)[0].strip("[]")
    return ipaddress.ip_address(host).is_loopback


def guarded_wildcard_orphan_world() -> World:
    """No manifests, the guard up, one orphan of ours listening on [::] (every interface)."""
    node = NodeConfig(serve_programs=SERVE_PROGRAMS)
    orphan = Orphan(pid=700, create_time=1.0, instance_id="old-1234abcd", listen=("[::]:8090",))
    return World(desired=Desired(models=MODELS, node=node),
                 observed=Observed(orphans=(orphan,)), remembered=Remembered())


@given(exposure_worlds())
@example(guarded_wildcard_orphan_world())
def test_servers_of_ours_beyond_loopback_are_always_stopped(w: World) -> None:
    """Rule (§5 loopback only, §4 orphans): every server of ours found listening beyond loopback
    is stopped — an orphan even under the empty-manifest guard, and a server we started whose
    role was switched to adopted. `[::]` / `::` is every interface, never loopback; an orphan
    listening on loopback only (127/8, ::1) is kept under the guard, stopped otherwise."""
    p = run(w)
    guard = not w.desired.roles and not w.desired.placed_elsewhere and not w.ctx.allow_empty
    for o in w.observed.orphans:
        d = p.decision(o.instance_id)
        assert d is not None
        exposed = [a for a in o.listen if not _loopback_oracle(a)]
        event("orphan " + ("exposed" if exposed else "on loopback") + (" under the guard" if guard else "")
              + (" (IPv6)" if any(a.startswith("[") for a in o.listen) else ""))
        if exposed or not guard:
            assert (d.verb, d.reason, d.pid) == (Verb.STOP, Reason.ORPHAN, o.pid), (o, d)
        else:
            assert (d.verb, d.reason) == (Verb.KEEP, Reason.EMPTY_MANIFESTS), (o, d)
    for obs in w.observed.roles:
        proc, spec, rec = obs.process, w.desired.role(obs.name), w.remembered.role(obs.name)
        ours = (spec is not None and spec.mode is Mode.MANAGED) or (
            rec is not None and rec.mode is Mode.MANAGED)
        if proc is None or not (proc.owned and proc.alive) or not obs.exposed or not ours:
            continue
        event("our server exposed" + (", its role now adopted" if spec is not None and
                                       spec.mode is Mode.ADOPTED else ""))
        d = p.decision(obs.name)
        assert d is not None and (d.verb, d.reason, d.pid) == (Verb.STOP, Reason.EXPOSED, proc.pid), d
