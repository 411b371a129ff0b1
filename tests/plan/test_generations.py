"""Hypothesis properties of §4 generations, orphans and interrupted work in plan()."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from reconciler.planner import identity
from reconciler.core.decisions import Reason, Verb
from reconciler.core.desired import Runtime, WantedState
from reconciler.core.observed import Intent, Orphan, Remembered, Terminal
from reconciler.planner.plan import plan
from reconciler.runtimes import spec_of
from tests.plan.worlds import World, worlds

#: The rungs a hold or the restart count of a *previous* generation decides.
_OLD_GENERATION = {Reason.TERMINAL, Reason.BACKOFF, Reason.MAX_RESTARTS, Reason.CRASHED}


def run(w: World):
    return plan(w.desired, w.observed, w.remembered, w.ctx, w.now)


def _with_restarted_at(w: World, value: str, *, records_too: bool) -> World:
    """Every desired role gets ``restarted_at=value``; its record too when ``records_too``."""
    roles = tuple(attrs.evolve(r, restarted_at=value) for r in w.desired.roles)
    desired = attrs.evolve(w.desired, roles=roles)
    if not records_too:
        return attrs.evolve(w, desired=desired)
    recs = tuple(
        attrs.evolve(r, restarted_at=value,
                     generation=identity.generation(r.launch_digest, value))
        if r.launch_digest is not None and spec_of(r.runtime).launched else r
        for r in w.remembered.roles)
    return attrs.evolve(w, desired=desired, remembered=Remembered(roles=recs))


def _new_generation_roles(w: World) -> list[str]:
    """Wanted managed launched roles whose record names a launch (so a generation)."""
    out = []
    for spec in w.desired.roles:
        rec = w.remembered.role(spec.name)
        if (spec.managed and spec.state is WantedState.RUNNING
                and spec.runtime is not Runtime.OLLAMA
                and rec is not None and rec.launch_digest is not None
                and rec.mode is spec.mode and rec.runtime is spec.runtime):
            out.append(spec.name)
    return out


@given(worlds())
def test_new_generation_clears_holds_and_backoff(w: World) -> None:
    """A new restarted_at: no hold, backoff or give-up of the old generation applies; count 0."""
    fresh = _with_restarted_at(w, "rollout-2", records_too=False)
    p = run(fresh)
    for name in _new_generation_roles(fresh):
        d = p.decision(name)
        assert d is not None
        assert d.reason not in _OLD_GENERATION, d
        if d.verb in (Verb.START, Verb.RESTART):
            assert d.restarts == 0, d
            assert d.generation == identity.generation(d.launch.digest, "rollout-2"), d


@given(worlds())
def test_same_generation_keeps_holds_and_backoff(w: World) -> None:
    """The same restarted_at on both sides decides exactly what no restarted_at decides."""
    before = run(w)
    same = run(_with_restarted_at(w, "rollout-1", records_too=True))
    for d in before.decisions:
        e = same.decision(d.role)
        assert e is not None
        assert (e.verb, e.reason, e.restarts, e.pid, e.status) == (
            d.verb, d.reason, d.restarts, d.pid, d.status), (d, e)


@given(worlds())
def test_terminal_hold_kept_without_a_new_generation(w: World) -> None:
    """A held role (gave-up, stopped-exposed) whose generation is unchanged never starts by itself."""
    p = run(w)
    for d in p.decisions:
        rec = w.remembered.role(d.role)
        spec = w.desired.role(d.role)
        if rec is None or rec.terminal is None or d.role in w.ctx.operator_starts:
            continue
        if spec is not None and rec.launch_digest is not None and d.launch is not None \
                and d.launch.digest != rec.launch_digest:
            continue  # a new generation (an edited launch)
        assert d.verb not in (Verb.START, Verb.RESTART, Verb.LOAD) or d.reason is Reason.SPEC_CHANGED, d


_orphans = st.lists(
    st.builds(Orphan, pid=st.integers(5000, 5999), create_time=st.just(1.0),
              instance_id=st.sampled_from(["old-0000aaaa", "coder-1234abcd", "x-deadbeef"]),
              listen=st.sampled_from([(), ("127.0.0.1:8095",), ("0.0.0.0:8096",)])),
    max_size=3, unique_by=lambda o: o.pid)


@given(worlds(min_roles=0), _orphans)
def test_orphans_only_as_observed(w: World, orphans) -> None:
    """Each proven orphan gets one stop (kept only under the guard); no other pid is an orphan."""
    w = attrs.evolve(w, observed=attrs.evolve(w.observed, orphans=tuple(orphans)))
    p = run(w)
    by_pid = {o.pid: o for o in orphans}
    roles = [d.role for d in p.decisions]
    assert len(roles) == len(set(roles)), "one decision per name, two orphans of one instance too"
    orphan_decisions = [d for d in p.decisions if d.pid in by_pid]
    assert sorted(d.pid for d in orphan_decisions) == sorted(by_pid)
    guarded = not w.desired.roles and not w.ctx.allow_empty
    for d in orphan_decisions:
        exposed = any(not a.startswith("127.") for a in by_pid[d.pid].listen)
        if guarded and not exposed:
            assert (d.verb, d.reason) == (Verb.KEEP, Reason.EMPTY_MANIFESTS), d
        else:
            assert (d.verb, d.reason) == (Verb.STOP, Reason.ORPHAN), d
            assert d.owner_id == by_pid[d.pid].instance_id
    for d in p.decisions:
        if d.reason is Reason.ORPHAN:
            assert d.pid in by_pid, "an orphan stop names only a proven orphan's pid"


@given(worlds())
def test_interrupted_stop_is_not_a_crash(w: World) -> None:
    """A record whose intent stopped its now-dead server: no count, no backoff, no give-up."""
    recs = []
    for r in w.remembered.roles:
        proc = w.observed.role(r.name).process
        dead = proc is None or not proc.alive or not proc.owned
        if r.pid is not None and dead and r.terminal is None:
            r = attrs.evolve(r, intent=Intent(verb="restart", reason="spec_changed",
                                              instance_id=r.instance_id, stops=r.pid))
        recs.append(r)
    w = attrs.evolve(w, remembered=Remembered(roles=tuple(recs)))
    p = run(w)
    for r in recs:
        if r.intent is None:
            continue
        d = p.decision(r.name)
        assert d is not None
        assert d.reason not in (Reason.CRASHED, Reason.BACKOFF, Reason.MAX_RESTARTS), d
        assert d.restarts <= r.restarts, d


def test_terminal_enum_is_what_the_holds_name() -> None:
    """The two holds a generation clears are the two Terminal states (no third one slipped in)."""
    assert set(Terminal) == {Terminal.GAVE_UP, Terminal.STOPPED_EXPOSED}
