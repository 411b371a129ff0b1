"""The fetch rung: a start whose Model must first arrive waits for it (PURE).

BEHAVIOUR §1.6. ``gate`` looks at every drafted start or restart; when the
role's Model (or draft Model) has a source and is not yet in this node's
cache, the draft becomes, in this order:

* **refuse ``no_fetch``** when the node has no ``fetch`` and no copy of the
  Model (no root, no ``model_roots`` entry): the message says the Model has a
  source and the node does not fetch;
* **refuse ``fetch_failed``** when this generation's bytes did not match
  (sticky until a new generation or ``reconcile models fetch --retry``);
* **wait ``fetching``** with the progress while our fetch process runs;
* **refuse ``no_disk``** when the missing bytes, plus those of the fetches
  planned before it, plus ``min_free``, exceed what is free in the cache;
* otherwise **wait ``fetching``** and one ``Fetch`` of the Model is planned
  (several roles waiting for one Model share it).

A running server whose restart waits keeps running and keeps what it holds.
A fetch reserves no memory: the roles' claims are placed when they start.
"""

from __future__ import annotations

import functools

from typing import Mapping, Sequence

import attrs

from reconciler.core.decisions import Fetch, Reason, Refuse, Status, Verb, Wait
from reconciler.core.desired import ModelSpec, NodeConfig, ProgramSpec, RoleSpec, program_key
from reconciler.core.observed import FetchObservation, FetchState
from reconciler.core.units import format_duration, format_size
from reconciler.planner.ledger import Draft

_GATED = (Verb.START, Verb.RESTART)
#: Seconds between looks while a fetch runs (progress in ``status``).
POLL = 2.0


def progress(obs: FetchObservation) -> str:
    """``fetching qwen: 43 %, 1.2 GB/s, 2m left``."""
    done = obs.total - obs.missing
    pct = int(100 * done / obs.total) if obs.total else 100
    text = f"fetching {obs.model}: {pct} %"
    if obs.rate:
        text += f", {format_size(int(obs.rate))}/s, {format_duration(obs.missing / obs.rate)} left"
    return text


def gate(drafts: Sequence[Draft], specs: Mapping[str, RoleSpec],
         models: Mapping[str, ModelSpec], fetches: Mapping[str, FetchObservation],
         node: NodeConfig, programs: Mapping[str, ProgramSpec] | None = None
         ) -> tuple[Sequence[Draft], tuple[Fetch, ...]]:
    """The drafts with waits and refusals for Models (and §14 Programs: ``programs``, role →
    the Program with a source it runs) not here yet; the fetches to start (``drafts``
    itself when nothing has a source: nothing to gate)."""
    programs = programs or {}
    if not programs and not any(map(_fetchable, models.values())):
        return drafts, ()  # most nodes: every Model was placed by hand
    planned: dict[str, Fetch] = {}
    out = []
    for d in drafts:
        spec = specs.get(d.decision.role)
        if d.decision.verb not in _GATED or spec is None:
            out.append(d)
            continue
        gated = _gated(d, spec, models, fetches, node, planned)
        program = programs.get(spec.name)
        if gated is d and program is not None:
            gated = _program(d, program, fetches, node, planned)
        out.append(gated)
    return out, tuple(planned.values())


@functools.lru_cache(maxsize=1024)
def _fetchable(model: ModelSpec) -> bool:
    """``model.fetchable``, kept per Model: every pass of every node asks it."""
    return model.fetchable


def _gated(d: Draft, spec: RoleSpec, models: Mapping[str, ModelSpec],
           fetches: Mapping[str, FetchObservation], node: NodeConfig,
           planned: dict[str, Fetch]) -> Draft:
    for name in (spec.model, spec.serve.draft_model):
        model = models.get(name) if name else None
        if model is None or not model.fetchable:
            continue
        if node.fetch is None:
            if model.root is None:
                msg = (f"Model {name} has a source, but node {node.name or '(this node)'} "
                       "does not fetch (no spec.fetch in its NodeConfig) and has no copy "
                       "(no root, no model_roots entry)")
                return _becomes(d, Verb.REFUSE, Reason.NO_FETCH, Status.REFUSED, msg)
            continue
        got = _waits(d, name, fetches.get(model.name), node, planned,
                     f"a fixed Model or `reconcile models fetch --retry {name}`")
        if got is not None:
            return got
    return d


def _program(d: Draft, program: ProgramSpec, fetches: Mapping[str, FetchObservation],
             node: NodeConfig, planned: dict[str, Fetch]) -> Draft:
    """§14 a role whose Program comes from a release archive waits for its fetch."""
    if node.fetch is None:
        msg = (f"Program {program.name} comes from a release archive, but node "
               f"{node.name or '(this node)'} does not fetch (no spec.fetch in its NodeConfig)")
        return _becomes(d, Verb.REFUSE, Reason.NO_FETCH, Status.REFUSED, msg)
    got = _waits(d, program_key(program.name), fetches.get(program_key(program.name)), node,
                 planned, "a fixed Program")
    return d if got is None else got


def _waits(d: Draft, name: str, obs: FetchObservation | None, node: NodeConfig,
           planned: dict[str, Fetch], fix: str) -> Draft | None:
    """The wait or refusal while ``name`` (a Model, or ``program/<name>``) is not here, or
    None when it is (or is a hand-placed copy)."""
    assert node.fetch is not None
    if obs is None or obs.state is FetchState.DONE:
        return None  # a hand-placed copy (model_roots), or here already
    if obs.state is FetchState.FAILED:
        msg = f"fetch of {name} failed: {obs.detail}; {fix}"
        return _becomes(d, Verb.REFUSE, Reason.FETCH_FAILED, Status.REFUSED, msg)
    if obs.state is FetchState.BACKOFF:
        return _becomes(d, Verb.WAIT, Reason.FETCHING, Status.FETCHING,
                        f"fetch of {name} failed: {obs.detail}; retrying soon",
                        retry_in=POLL)
    if obs.state is FetchState.RUNNING:
        return _becomes(d, Verb.WAIT, Reason.FETCHING, Status.FETCHING, progress(obs),
                        retry_in=POLL)
    if name in planned:
        return _becomes(d, Verb.WAIT, Reason.FETCHING, Status.FETCHING,
                        f"fetching {name}: starting", retry_in=POLL)
    ahead = sum(f.bytes for f in planned.values())
    if obs.free is not None and obs.missing + ahead + node.fetch.min_free > obs.free:
        msg = (f"not enough disk to fetch {name}: {format_size(obs.missing)}"
               + (f" (+{format_size(ahead)} fetched before it)" if ahead else "")
               + f" + min_free {format_size(node.fetch.min_free)} > "
               f"{format_size(obs.free)} free in {node.fetch.cache}")
        return _becomes(d, Verb.REFUSE, Reason.NO_DISK, Status.REFUSED, msg)
    where = "missing on this node" if obs.missing == obs.total else "partly on this node"
    free = f"; {format_size(obs.free)} free" if obs.free is not None else ""
    planned[name] = Fetch(model=name, generation=obs.generation, bytes=obs.missing,
                          free=obs.free, why=f"{where}{free}")
    return _becomes(d, Verb.WAIT, Reason.FETCHING, Status.FETCHING,
                    f"fetching {name}: starting", retry_in=POLL)


def _becomes(d: Draft, verb: Verb, reason: Reason, status: Status, detail: str,
             retry_in: float | None = None) -> Draft:
    """The draft turned into a wait or refusal: it claims nothing (memory or devices); a live
    server keeps what it holds."""
    running = d.decision.process  # a live server whose restart waits keeps running
    act = Wait(running=running) if verb is Verb.WAIT else Refuse(running=running)
    decision = attrs.evolve(d.decision, act=act, reason=reason, status=status, detail=detail,
                            why=detail, release=0, retry_in=retry_in,
                            devices=d.devices if d.holds is not None else ())
    return attrs.evolve(d, decision=decision, claim=None)
