"""A pure stand-in for executor + observer, for planner properties (test helper).

``simulate(plan, world)`` applies every decision to the world the way the
executor would, and returns the next world as values: started processes are
ours, alive and answering; stopped ones are gone; loads and unloads show on
the one Ollama server's ``/api/ps``. What the store remembers afterwards is
not imitated here: each record comes from the real ``records.after_decision``,
given the facts the executor would report, exactly as the shell's pass does.

``failing`` names roles whose action fails this pass (a spawn that dies, a
stop that does not take, a load or unload Ollama refuses): the world stays as
it was for them, and the executor reports the failure. As the executor does
(``world/execute.apply``, BEHAVIOUR §7), once a stop, restart or unload has not
freed its memory, every later start or load that reserves memory, and every
later restart that grows its footprint, is skipped: nothing happens, and the
store is told so.
"""

from __future__ import annotations

import attrs

from reconciler.core.decisions import Decision, Plan, Verb
from reconciler.core.desired import Desired
from reconciler.core.observed import (
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
)
from reconciler.planner.records import ActionFacts, after_decision
from reconciler.runtimes.ollama import SPEC as OLLAMA


def _next_pid(observed: Observed, remembered: Remembered) -> int:
    pids = [o.process.pid for o in observed.roles if o.process is not None]
    pids += [r.pid for r in remembered.roles if r.pid is not None]
    return max(pids, default=1000) + 1


def _tags(observed: dict[str, RoleObservation], tag: str, *, add: bool) -> None:
    """Ollama is one server: a load or unload shows on every Ollama role's probe."""
    for name, o in list(observed.items()):
        p = o.probe
        if p is None or not OLLAMA.lists(p.listed_models, tag):
            continue
        resident = tuple(t for t in p.resident_models if not OLLAMA.same(t, tag))
        if add:
            resident += (tag,)
        observed[name] = attrs.evolve(o, probe=attrs.evolve(p, resident_models=resident))


def _act(d: Decision, obs: dict[str, RoleObservation], pid: int, now: float,
         fails: bool) -> ActionFacts | None:
    """Change the world as the executor would, and say what it would report."""
    o = obs.get(d.role, RoleObservation(name=d.role))
    if d.verb in (Verb.START, Verb.RESTART):
        assert d.launch is not None
        if fails:  # the old server is stopped, the new one dies at once
            obs[d.role] = attrs.evolve(o, process=None, probe=None, exposed=())
            return ActionFacts(ok=False, exited=True)
        obs[d.role] = attrs.evolve(
            o, process=ProcessFacts(pid=pid, create_time=now, alive=True, owned=True),
            probe=ProbeFacts(health=Health.UP), port_taken=False, exposed=())
        return ActionFacts(ok=True, exited=True, pid=pid, create_time=now)
    if d.verb is Verb.STOP:
        if fails:  # it lingers: still alive, still ours
            return ActionFacts(ok=False, exited=False)
        obs[d.role] = attrs.evolve(o, process=None, probe=None, exposed=())
        return ActionFacts(ok=True, exited=True)
    if d.verb in (Verb.LOAD, Verb.UNLOAD):
        assert d.model_tag is not None
        if not fails:
            _tags(obs, d.model_tag, add=d.verb is Verb.LOAD)
        return ActionFacts(ok=not fails)
    return None


_FREES_MEMORY = frozenset({Verb.STOP, Verb.RESTART, Verb.UNLOAD})


def _claims(d: Decision) -> bool:
    """The executor's rule: a start or load that reserves memory (host or on devices), or a
    restart that grows."""
    if d.verb in (Verb.START, Verb.LOAD):
        return d.reserve > 0 or bool(d.devices)
    return d.verb is Verb.RESTART and d.reserve > d.release


def _freed(d: Decision, fails: bool) -> bool:
    """Did this stop, restart or unload really free its memory (as the executor judges)?

    Here a failing unload is refused and a failing stop lingers; a failing
    restart stopped the old server (its successor died), so it freed.
    """
    if d.verb is Verb.RESTART:
        return True
    return not fails


def skipped(plan: Plan, failing: frozenset[str] = frozenset()) -> frozenset[str]:
    """The roles whose action the executor skips: claims after a stop that did not free."""
    out, memory_held = set(), False
    for d in plan.decisions:
        if not d.acts:
            continue
        if memory_held and _claims(d):
            out.add(d.role)
        elif d.verb in _FREES_MEMORY and not _freed(d, d.role in failing):
            memory_held = True
    return frozenset(out)


def simulate(
    plan: Plan, desired: Desired, observed: Observed, remembered: Remembered, now: float,
    failing: frozenset[str] = frozenset(),
) -> tuple[Observed, Remembered]:
    """The world and the store after ``plan`` was applied at ``now``."""
    obs = {o.name: o for o in observed.roles}
    before = {o.name: o for o in observed.roles}
    recs = {r.name: r for r in remembered.roles}
    specs = {r.name: r for r in desired.roles}
    pid = _next_pid(observed, remembered)
    skip = skipped(plan, failing)
    for d in plan.decisions:
        if d.role in skip:
            facts: ActionFacts | None = ActionFacts(ok=False, skipped=True)
        else:
            facts = _act(d, obs, pid, now, d.role in failing)
        if facts is not None and facts.pid is not None:
            pid += 1
        after = after_decision(recs.get(d.role), specs.get(d.role), d,
                               before.get(d.role, RoleObservation(name=d.role)), facts, now)
        if after is None:
            recs.pop(d.role, None)
        else:
            recs[d.role] = after
    return (
        attrs.evolve(observed, roles=tuple(sorted(obs.values(), key=lambda o: o.name))),
        Remembered(roles=tuple(sorted(recs.values(), key=lambda r: r.name))),
    )
