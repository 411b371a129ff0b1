"""A pure stand-in for executor + store + observer, for planner properties (test helper).

``simulate(plan, observed, remembered, now)`` applies every decision the way
the shell would, and returns the next world as values: started processes are
ours, alive and answering; stopped ones are gone; records carry what the shell
persists (``restarts``, ``exited_at``, terminal states, reservations, Ollama
``we_loaded``). Nothing fails: this is the world "without faults".
"""

from __future__ import annotations

import attrs

from reconciler.decisions import Decision, Plan, Reason, Verb
from reconciler.desired import Mode
from reconciler.observed import (
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
    Terminal,
)
from reconciler.runtimes.ollama import SPEC as OLLAMA


def _next_pid(observed: Observed, remembered: Remembered) -> int:
    pids = [o.process.pid for o in observed.roles if o.process is not None]
    pids += [r.pid for r in remembered.roles if r.pid is not None]
    return max(pids, default=1000) + 1


def _record(d: Decision) -> RoleRecord:
    assert d.runtime is not None and d.instance_id is not None
    return RoleRecord(name=d.role, instance_id=d.instance_id, runtime=d.runtime,
                      mode=Mode.MANAGED, port=d.port or 0)


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


def simulate(
    plan: Plan, observed: Observed, remembered: Remembered, now: float
) -> tuple[Observed, Remembered]:
    obs = {o.name: o for o in observed.roles}
    recs = {r.name: r for r in remembered.roles}
    pid = _next_pid(observed, remembered)
    for d in plan.decisions:
        o = obs.get(d.role, RoleObservation(name=d.role))
        rec = recs.get(d.role)
        reserved = (rec.reserved if rec is not None else 0) - d.release + d.reserve
        if d.verb in (Verb.START, Verb.RESTART):
            assert d.launch is not None
            obs[d.role] = attrs.evolve(
                o, process=ProcessFacts(pid=pid, create_time=now, alive=True, owned=True),
                probe=ProbeFacts(health=Health.UP), port_taken=False, exposed=())
            recs[d.role] = attrs.evolve(
                rec if rec is not None else _record(d), instance_id=d.instance_id or "",
                port=d.port or 0, pid=pid, create_time=now, launch_digest=d.launch.digest,
                launch_argv=d.launch.argv, restarts=d.restarts, started_at=now, exited_at=None,
                healthy_since=None, terminal=None, terminal_detail="", reserved=reserved)
            pid += 1
        elif d.verb is Verb.STOP:
            obs[d.role] = attrs.evolve(o, process=None, probe=None, exposed=())
            if rec is not None:
                exposed = d.reason is Reason.EXPOSED
                recs[d.role] = attrs.evolve(
                    rec, pid=None, create_time=None, exited_at=None, healthy_since=None,
                    reserved=reserved, restarts=d.restarts,
                    terminal=Terminal.STOPPED_EXPOSED if exposed else rec.terminal)
        elif d.verb is Verb.LOAD:
            assert d.model_tag is not None
            _tags(obs, d.model_tag, add=True)
            recs[d.role] = attrs.evolve(
                rec if rec is not None else _record(d), we_loaded=True, model_tag=d.model_tag,
                restarts=d.restarts, exited_at=None, healthy_since=None, terminal=None,
                reserved=reserved)
        elif d.verb is Verb.UNLOAD:
            assert d.model_tag is not None
            _tags(obs, d.model_tag, add=False)
            if rec is not None:
                recs[d.role] = attrs.evolve(rec, we_loaded=False, model_tag=None,
                                            exited_at=None, reserved=reserved)
        elif d.verb is Verb.FORGET:
            recs.pop(d.role, None)
        elif rec is not None:
            proc = o.process
            ollama_gone = (rec.we_loaded and o.probe is not None and o.probe.health is Health.UP
                           and not OLLAMA.lists(o.probe.resident_models, rec.model_tag))
            # the shell stores when it first saw the exit, whatever the decision
            dead = (rec.pid is not None and not (proc is not None and proc.owned and proc.alive)
                    ) or ollama_gone or d.verb in (Verb.WAIT, Verb.GIVE_UP)
            healthy = rec.healthy_since
            if d.reason is Reason.IN_SYNC and healthy is None:
                healthy = now  # first seen answering since the last start
            recs[d.role] = attrs.evolve(
                rec, restarts=d.restarts, reserved=reserved, healthy_since=healthy,
                exited_at=(rec.exited_at if rec.exited_at is not None else now) if dead
                else rec.exited_at,
                terminal=Terminal.GAVE_UP if d.verb is Verb.GIVE_UP else rec.terminal)
    return (
        attrs.evolve(observed, roles=tuple(sorted(obs.values(), key=lambda o: o.name))),
        Remembered(roles=tuple(sorted(recs.values(), key=lambda r: r.name))),
    )
