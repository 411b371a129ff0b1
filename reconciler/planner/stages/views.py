"""The first stage: the pass-wide tables, and every role's view of itself (PURE).

``stage(inputs)`` indexes the manifests, the observations and the records by
name, works out the empty-manifest guard (§4) and this pass's launches, and
builds one ``Role`` per role named in the manifests or in the store (``view``):
a killed pass's work read as finished (§4), the launch and generation, whether
our process runs and answers, the restart count after its resets.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from reconciler.core.desired import ModelSpec, NodeConfig, RoleSpec
from reconciler.core.observed import RoleRecord
from reconciler.planner.launches import Bound
from reconciler.planner import generations, intents, launches, livenessrungs, loadrungs, policy
from reconciler.planner.rungs import Role
from reconciler.planner.stages.values import Inputs, Views, make_views
from reconciler.core.decisions import Keep, Target
from reconciler.core.positional import by_position
from reconciler.core.observed import RoleObservation
from reconciler.runtimes import SPECS, spec_of


class Tables(NamedTuple):
    """What ``view`` reads of the pass (a tuple: built once per pass, read once per role)."""

    specs: Mapping[str, RoleSpec]
    records: Mapping[str, RoleRecord]
    observations: Mapping[str, RoleObservation]
    models: Mapping[str, ModelSpec]
    node: NodeConfig
    now: float
    operator_starts: frozenset[str]
    launcher: Bound
    served: Mapping[tuple[str, int], list[tuple[str, set[str]]]]


def stage(inputs: Inputs) -> Views:
    """The tables by name, then one ``Role`` per role, in name order."""
    desired, ctx = inputs.desired, inputs.ctx
    models = {m.name: m for m in desired.models}
    specs = {r.name: r for r in desired.roles}
    records = {r.name: r for r in inputs.remembered.roles}
    observations = {o.name: o for o in inputs.observed.roles}
    launcher = launches.for_node(desired.node, dict(ctx.environ), ctx.data_root,
                                 desired.programs).bind(
        desired.models, models)
    served = loadrungs.served(desired.roles, models)
    tables = Tables(specs=specs, records=records, observations=observations, models=models,
                    node=desired.node, now=inputs.now, operator_starts=ctx.operator_starts,
                    launcher=launcher, served=served)
    # §4 the empty-manifest guard is about the set, not this node's share (§10):
    # roles placed on other nodes make a set that is not empty.
    elsewhere = dict(desired.placed_elsewhere)
    return make_views(
        inputs=inputs, node=desired.node, models=models, specs=specs, records=records,
        observations=observations, checks={c.name: c for c in inputs.observed.models},
        elsewhere=elsewhere, guard=not specs and not elsewhere and not ctx.allow_empty,
        launcher=launcher, served=served,
        roles=tuple([view(tables, name) for name in sorted(specs.keys() | records.keys())]))


#: ``Target(pid=…, create_time=…, owner_id=…)`` by position.
_target = by_position(Target)
#: (pid, create time, owner id) → the ``Keep`` of that running process (its ``running``: the
#: role's ``process``): the same values pass after pass, built once, as ``_UNSEEN``'s are.
#: Fewer values built per running role per pass, and fewer left alive for the collector
#: (the decisions of a pass outlive it: at 10k roles the collector's share grew with them).
_KEPT: dict[tuple[int, float, str], Keep] = {}
#: The ``Keep`` of a role with no live process of ours.
_KEEP_NOTHING = Keep(running=None)
#: role → its observation when nothing was observed of it (a role never started): the
#: same value pass after pass, built once (bounded as ``launches.LIMIT`` bounds its tables).
_UNSEEN: dict[str, RoleObservation] = {}


def forget() -> None:
    """Empty ``_KEPT`` and ``_UNSEEN`` (``plan.forget``)."""
    _KEPT.clear()
    _UNSEEN.clear()


def _unseen(name: str) -> RoleObservation:
    got = _UNSEEN.get(name)
    if got is None:
        if len(_UNSEEN) >= launches.LIMIT:
            _UNSEEN.clear()
        got = _UNSEEN[name] = RoleObservation(name=name)
    return got


def view(v: Tables, name: str) -> Role:
    """Everything the ladder knows about role ``name`` this pass."""
    spec, record, node, now = v.specs.get(name), v.records.get(name), v.node, v.now
    obs = v.observations.get(name) or _unseen(name)
    proc = obs.process
    running = proc is not None and proc.owned and proc.alive
    interrupted = None
    if record is not None and record.intent is not None:
        finished = intents.finish_interrupted(record, obs, now)
        if finished.pid is None and record.pid is not None:
            interrupted = record.intent
        record = finished
    rpolicy = spec.restart if spec is not None else node.restart
    operator = name in v.operator_starts
    # §3 the launch, and (§7.1) the devices it is built with: fixed ids, or those it last ran on.
    prepared = v.launcher.prepare(spec, record) if spec is not None else None
    if prepared is not None:  # what the launch says, read once (a removed role has none)
        instance, generation, argv, digest, assignment, claim = (
            prepared.instance_id, prepared.generation, prepared.argv, prepared.digest,
            prepared.assignment, prepared.claim)
    else:
        instance, generation, argv, digest, assignment, claim = (
            record.instance_id, None, None, None, None, None)
    fresh = generations.is_new(generation, record)
    probe = obs.probe
    answering = probe is not None and policy.answering(probe.health)
    runtime = SPECS[spec.runtime] if spec is not None else None  # (read once per role)
    if runtime is not None and runtime.shared_endpoint:
        answering = answering and runtime.lists(probe.resident_models,
                                                loadrungs.tag_of(spec, v.models))
    else:
        # (§4.1 liveness is opt-in: most roles have no checks to ask about)
        answering = answering and running and not (
            spec is not None and spec.liveness is not None
            and livenessrungs.failing(spec, record, probe, now))
    restarts = policy.restart_count(record, rpolicy, now, answering=answering,
                                    operator_start=operator or fresh)
    kept = _KEEP_NOTHING
    if running:  # its process: an edit of model, port or host changes the instance id; the
        # running process still carries the id it was started with: stops use that.
        key = (proc.pid, proc.create_time, record.instance_id if record is not None else instance)
        kept = _KEPT.get(key)
        if kept is None:
            if len(_KEPT) >= launches.LIMIT:
                _KEPT.clear()
            kept = _KEPT[key] = Keep(running=_target(*key))
    sharing: frozenset[str] = frozenset()
    load = record.load if record is not None else None  # §2 an Ollama role's load part
    if load is not None and spec_of(record.runtime).shared_endpoint:
        sharing = loadrungs.serving(v.served, record.host, record.port, load.tag,
                                    spec_of(record.runtime)) - {name}
    # By position, in the fields' order (a keyword call of 21 costs a dict: rungs.Role).
    return Role(
        name, spec, record, obs,
        v.launcher,  # launcher
        prepared,
        rpolicy,  # policy
        running, restarts, operator, sharing,
        spec.runtime if spec is not None else record.runtime,  # runtime
        spec.serve.port if spec is not None else record.port,  # port
        spec.serve.host if spec is not None else record.host,  # host
        instance,  # instance_id
        kept.running,  # process
        kept,
        record.instance_id if running and record is not None else None,  # owner_id
        generation, fresh, interrupted,
        argv, digest, assignment, claim,
        record.reserved if record is not None else 0,  # reserved
    )
