"""The ladder stage: one draft per role, its rungs walked top to bottom (PURE).

``stage(views)`` walks each role's ladder (``_decide``): the first matching
rule wins; each rule is one commented branch citing BEHAVIOUR.md. The rungs of
managed servers and adopted roles are here; those of models loaded on a shared
server are in ``loadrungs`` (§2), the on-demand ones in ``demandrungs`` (§9),
the liveness ones in ``livenessrungs`` (§4.1), and what they all build on
(``Role``, ``draft``, start gates, backoff, holds) in ``rungs``. For each
on-demand role it also notes (§9) whether eviction may stop it now, later, or
not, for the eviction stage.

Size: the ladder is read top to bottom in one place on purpose; the Ollama, on-
demand and liveness rungs are already modules of their own.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from reconciler.core import demand as demands
from reconciler.core import ownership
from reconciler.planner import demandrungs, exitreasons, livenessrungs, loadrungs, policy, versions
from reconciler.core.decisions import Reason, Status, Verb
from reconciler.core.demand import Demand
from reconciler.core.desired import (
    Mode,
    NodeConfig,
    RouterConfig,
    WantedState,
)
from reconciler.core.instances import group_of, replica_of
from reconciler.planner.ledger import Draft
from reconciler.core.observed import Health, ModelCheck
from reconciler.planner.rungs import (
    Role,
    backoff,
    changes,
    draft,
    model_refusal,
    start,
    started,
    terminal,
)
from reconciler.planner.stages.values import Drafted, OnDemand, Views, make_drafted
from reconciler.runtimes import SPECS, spec_of
from reconciler.runtimes.common import ANSWERING_STATUS
from reconciler.core.units import format_duration


#: A node without a router (§9): its defaults, built once rather than once per pass.
_NO_ROUTER = RouterConfig()
#: §9 no on-demand role with demand: nothing for eviction to look at.
_NOBODY = OnDemand()


def stage(v: Views) -> Drafted:
    """A draft per role, in name order; §9 which on-demand roles eviction may stop."""
    drafts = []
    roles: dict[str, Role] = {}  # the roles placed on devices, for their launches after placement
    idle: dict[str, float] = {}  # §9 on-demand roles that may be evicted → when last used
    later: dict[str, float] = {}  # §9 other on-demand roles, that may make room later → when
    claimants: set[str] = set()  # §9 on-demand roles whose refused claim may wait for them
    node, now, demand = v.node, v.now, v.demand
    models, checks, guard, elsewhere = v.models, v.checks, v.guard, v.elsewhere  # (read once)
    residency = (node.router or _NO_ROUTER).min_residency
    # §12 an instance's name is group/index (the names joined: one scan in C, not a
    # generator's step per role)
    scaled = _scaled(v) if ("/" in "\n".join(v.records) or "/" in "\n".join(v.specs)) else {}
    for r in v.roles:
        name = r.name
        drafted = _decide(r, node, models, checks, guard, now, elsewhere.get(name), demand)
        if scaled and group_of(name) in scaled:
            drafted = _scale(r, drafted, scaled[group_of(name)])
        if r.claim is not None:
            roles[name] = r
        if demand is not None and r.spec is not None and r.spec.on_demand:
            drafted = demandrungs.demand_hint(r, drafted, demand, now)
            claimants.add(name)
            if demandrungs.evictable(r, drafted, demand, now, residency):
                idle[name] = demands.last_used(demand.of(name), started(r), demand.since)
            else:  # holds memory, or claims it in this pass, or will when its backoff ends
                later[name] = (demandrungs.evictable_in(r, demand, now, residency)
                               if demandrungs.holds(r, drafted) else 1.0)
        drafts.append(drafted)
    return make_drafted(views=v, drafts=tuple(drafts), claimants=roles,
                   on_demand=OnDemand(idle=idle, later=later, claimants=frozenset(claimants))
                   if claimants else _NOBODY)


def _scaled(v: Views) -> dict[str, tuple[int, int]]:
    """§12 groups with a server of ours remembered → (replicas before, replicas now).

    Before: one more than the highest index whose record holds a server (the store
    keeps no count: a stopped instance's record is no instance any more).
    """
    before: dict[str, int] = {}
    for name, record in v.records.items():
        if record.pid is not None:
            group = group_of(name)
            before[group] = max(before.get(group, 1), replica_of(name) + 1)
    out = {}
    for group, was in before.items():
        spec = v.specs.get(group)
        out[group] = (was, spec.replicas if spec is not None else 0)
    return out


def _scale(r: Role, drafted: Draft, counts: tuple[int, int]) -> Draft:
    """§12 the reason of an instance's stop or start when its role's replicas changed:
    ``scale_down`` for an instance past the count (its stop, its forget), ``scale_up`` for
    a new instance beside running ones. Anything else is the ladder's as it is."""
    was, now = counts
    d = drafted.decision
    replica = replica_of(r.name)
    if r.spec is None and now and replica >= now and d.reason is Reason.REMOVED:
        why = f"replicas {max(was, replica + 1)} → {now}"
        return attrs.evolve(drafted, decision=attrs.evolve(
            d, reason=Reason.SCALE_DOWN, why=why,
            detail=d.detail.replace("removed from the manifests", f"scaled down ({why})")))
    if (not r.running and replica >= was and d.reason is Reason.MISSING
            and d.verb is Verb.START and now > was and r.spec is not None
            and not r.spec.on_demand):  # an on-demand instance starts on its demand (§9)
        return attrs.evolve(drafted, decision=attrs.evolve(
            d, reason=Reason.SCALE_UP, why=f"replicas {was} → {now}"))
    return drafted


def _decide(r: Role, node: NodeConfig, models, checks, guard: bool, now: float,
            placed: tuple[str, ...] | None = None, demand: Demand | None = None) -> Draft:
    """The ladder for one role, top to bottom: the first rung that matches decides."""
    spec, rec = r.spec, r.record
    # (``spec.managed``, ``spec.on_demand``, ``node.port_allowed`` spelled out: every role)
    managed = (spec.mode if spec is not None else rec.mode if rec is not None else None
               ) is Mode.MANAGED
    # §5 loopback only: our own server reachable beyond loopback is stopped
    # first of all (even under the empty-manifest guard, and even once its role
    # was switched to adopted: the process is still the one we started, proven
    # ours); terminal afterwards.
    ours = managed or (rec is not None and rec.mode is Mode.MANAGED)
    if r.running and r.obs.exposed and ours:
        where = ", ".join(r.obs.exposed)
        return draft(r, Verb.STOP, Reason.EXPOSED, Status.STOPPED_EXPOSED,
                     f"reachable beyond loopback on {where}; stopped until `reconcile start "
                     f"{r.name}`", why=f"listening on {where}", release=r.reserved)
    if spec is None:
        return _removed(r, guard, placed)
    # §1.3/§2 port allowlist: a role outside it gets no packet and no action.
    allowed = node.allowed_ports
    if allowed is not None and spec.serve.port not in allowed:
        return draft(r, Verb.REFUSE, Reason.PORT_NOT_ALLOWED, Status.REFUSED,
                     f"port {spec.serve.port} is outside allowed_ports {node.allowed_ports}; "
                     "not probed", release=0 if r.running else r.reserved,
                     holds=r.reserved if r.running else None)
    if not managed:  # (spec.managed, read above)
        return _adopted(r, models, now)
    if SPECS[spec.runtime].loads_models:  # (the table itself: every role of every pass)
        return loadrungs.ollama(r, models, now)
    # §4 state: stopped → stop our server; nothing running → nothing to do.
    if spec.state is WantedState.STOPPED:
        if r.running:
            return draft(r, Verb.STOP, Reason.STATE_STOPPED, Status.RUNNING, "state: stopped",
                         release=r.reserved)
        return draft(r, Verb.KEEP, Reason.ABSENT, Status.STOPPED, "state: stopped; not running",
                     release=r.reserved)
    # §4 gave-up / stopped-exposed hold (for their generation) until an operator start.
    if rec is not None and rec.terminal is not None and not r.operator and not r.fresh:
        return terminal(r, rec)
    # §9 on-demand: nobody asks → stays stopped; no request for idle_after → stop.
    if spec.state is WantedState.ON_DEMAND and not r.operator:
        held = demandrungs.on_demand(r, demand, now)
        if held is not None:
            return held
    if r.running:
        return _running(r, checks, now)
    # §4 a new generation is a fresh start: no hold, no backoff, applied now.
    if r.fresh:
        cleared = f"; {rec.terminal} cleared" if rec is not None and rec.terminal else ""
        return start(r, checks, Verb.START, Reason.SPEC_CHANGED, Status.LOADED,
                     f"not running; a new generation{cleared}", why=changes(r))
    # §4 crashed: we started it and it is gone (or its pid now belongs to another).
    if rec is not None and (rec.pid is not None or rec.exited_at is not None) and not r.operator:
        # A known bad model outranks backoff: the role needs an operator now.
        refused = model_refusal(r, checks, release=r.reserved, kept=None)
        if refused is not None:
            return refused
        proc = r.obs.process
        exited = rec.exited_at if rec.exited_at is not None else (
            proc.exit_observed_at if proc is not None and proc.exit_observed_at is not None
            else now)
        # §4 every exit says why: its code or signal and its log's telling line.
        ended = rec.exit if rec.exit is not None else r.obs.exit
        what, said = (exitreasons.headline(ended), exitreasons.said(ended)) if ended else ("exited", "")
        held = backoff(r, exited, now, what, "restart", said=said)
        if held is not None:
            return held
        n, most = r.restarts + 1, r.policy.max_restarts
        told = f"{what}: {said}" if said else what
        return start(r, checks, Verb.RESTART, Reason.CRASHED, Status.EXITED,
                     f"{told}; restart {n} of {most}",
                     why=f"{told}; restart {n} of {most}" if ended else f"restart {n} of {most}",
                     restarts=n)
    # §4 missing: never started, cleanly stopped, or an operator start.
    why = "operator start" if r.operator else ""
    if r.interrupted is not None and not why:
        why = f"a killed pass's {r.interrupted.verb} is finished; not a crash"
    return start(r, checks, Verb.START, Reason.MISSING, Status.LOADED, "not running", why=why)


def _removed(r: Role, guard: bool, placed: tuple[str, ...] | None) -> Draft:
    """§4 a role the manifests no longer give this node: removed, or (§10) placed elsewhere."""
    rec = r.record
    assert rec is not None
    gone = "removed from the manifests"
    if placed is not None:  # still in the set, on other nodes (or on none)
        where = f"placed on {_listed(placed)}" if placed else "placed on no node"
        gone = f"{where}, not on this node"
        r = attrs.evolve(r, why=where)
    # §4 an empty manifest set stops nothing (and forgets nothing) unless --allow-empty.
    if guard:
        resident = r.running or (spec_of(rec.runtime).loads_models and ownership.loaded_by_us(rec))
        return draft(r, Verb.KEEP, Reason.EMPTY_MANIFESTS,
                     Status.RUNNING if r.running else Status.UNKNOWN,
                     "the manifest set is empty; nothing is stopped without --allow-empty",
                     holds=rec.reserved if resident or rec.reserved else None)
    # §4 adopted role removed → forget (it was never ours to touch).
    if rec.mode is Mode.ADOPTED:
        return draft(r, Verb.FORGET, Reason.REMOVED, Status.UNKNOWN, f"{gone}; forgotten")
    if spec_of(rec.runtime).loads_models:
        return loadrungs.ollama_release(r, Reason.REMOVED)
    # §4 managed role removed → stop our server; once gone, forget it.
    if r.running:
        return draft(r, Verb.STOP, Reason.REMOVED, Status.RUNNING, gone, release=rec.reserved)
    return draft(r, Verb.FORGET, Reason.REMOVED, Status.STOPPED, f"{gone}; not running",
                 release=rec.reserved)


def _listed(nodes: tuple[str, ...], limit: int = 3) -> str:
    return ", ".join(nodes) if len(nodes) <= limit else (
        f"{', '.join(nodes[:limit])} and {len(nodes) - limit} more")


def _running(r: Role, checks: Mapping[str, ModelCheck], now: float) -> Draft:
    rec, holds = r.record, r.reserved
    # §3/§4 spec_changed: a new generation (the launch digest, restarted_at) → restart
    # (a fresh start: the count is 0). A process started as another instance than
    # the role's is never the role's server "starting": it is replaced too.
    if r.argv is not None and rec is not None and (
            (rec.launch_digest is not None and r.digest != rec.launch_digest) or r.fresh
            or r.owner_id != r.instance_id):
        return start(r, checks, Verb.RESTART, Reason.SPEC_CHANGED, Status.RUNNING,
                     "running a previous launch", why=changes(r), keeps=True)
    # §4.1 liveness (opt-in: most roles have no checks, and no call here): alive but failing.
    if r.spec is not None and r.spec.liveness is not None:
        hung = livenessrungs.managed(r, checks, now)
        if hung is not None:
            return hung
    # §4 in sync: alive and answering; §14 its build the Program's (or not confirmed).
    probe = r.obs.probe  # (``r.health``, read once: every running role comes here)
    health = probe.health if probe is not None else None
    if health is Health.UP:
        assert probe is not None
        program = r.prepared.program if r.prepared is not None else None
        said = versions.check(program, probe.version) if (
            program is not None and probe.version is not None) else None  # (§14 most: none)
        if said is not None and said[0]:
            return draft(r, Verb.KEEP, Reason.VERSION_MISMATCH, Status.DEGRADED, said[1],
                         holds=holds)
        detail = (probe.detail or "up") + (f"; {said[1]}" if said is not None else "")
        return draft(r, Verb.KEEP, Reason.IN_SYNC, Status.RUNNING, detail, holds=holds)
    # §2 loading (503): poll again soon (polling, not backoff).
    if health is Health.LOADING:
        return draft(r, Verb.KEEP, Reason.LOADING, Status.LOADING, r.probe_detail("loading"),
                     retry_in=policy.POLL, holds=holds)
    # §4 a live but unhealthy server is reported, not restarted.
    if health is Health.UNHEALTHY:
        return draft(r, Verb.KEEP, Reason.UNHEALTHY, Status.DEGRADED, r.probe_detail("unhealthy"),
                     holds=holds)
    # Unknown is not down: alive, not answering (yet) → starting, else unknown.
    if rec is None or rec.healthy_since is None:
        grace = r.policy.startup_grace
        if rec is not None and rec.started_at is not None and now - rec.started_at >= grace:
            # §4 starting for longer than startup_grace: a failed start. Stopped;
            # the next pass counts it and backs off as after a crash.
            late = f"not answering {format_duration(grace)} after its start"
            return draft(r, Verb.STOP, Reason.STARTUP_TIMEOUT, Status.STARTING,
                         f"{late}; a failed start", why=late, holds=holds)
        return draft(r, Verb.KEEP, Reason.STARTING, Status.STARTING,
                     r.probe_detail("not answering yet"), retry_in=policy.POLL, holds=holds)
    return draft(r, Verb.KEEP, Reason.UNKNOWN, Status.DEGRADED,
                 r.probe_detail("not answering") + "; unknown is not down", holds=holds)


def _adopted(r: Role, models, now: float) -> Draft:
    """§1.2 adopted: observe only; status from the probe; never any action."""
    spec = r.spec
    assert spec is not None
    if spec.state is WantedState.STOPPED:
        return draft(r, Verb.FORGET, Reason.STATE_STOPPED, Status.STOPPED,
                     "state: stopped; adopted roles are only forgotten")
    probe, health = r.obs.probe, r.health
    if health in ANSWERING_STATUS:
        status = ANSWERING_STATUS[health]
    elif health is Health.UNREACHABLE and not r.obs.port_taken:
        status = Status.EXITED  # nothing accepts connections on its port
    else:
        status = Status.UNKNOWN
    detail = r.probe_detail(str(status))
    # Unknown is not down: a hung server still holds its memory.
    resident = status in (Status.RUNNING, Status.LOADING, Status.DEGRADED, Status.UNKNOWN)
    status, detail = livenessrungs.adopted(r, status, detail, now)
    if spec_of(spec.runtime).shared_endpoint and probe is not None and resident:
        tag = loadrungs.tag_of(spec, models)
        resident = spec_of(spec.runtime).lists(probe.resident_models, tag)
        if not spec_of(spec.runtime).lists(probe.listed_models, tag):
            status, detail = Status.DEGRADED, f"wanted model {tag} is not listed"
    # Answering adopted servers use memory: the ledger counts their footprint (or
    # what we still hold, for a server of ours that was switched to adopted).
    return draft(r, Verb.KEEP, Reason.ADOPTED, status, detail,
                 retry_in=policy.POLL if status is Status.LOADING else None,
                 holds=max(spec.memory.footprint, r.reserved) if resident else None,
                 release=0 if resident else r.reserved)
