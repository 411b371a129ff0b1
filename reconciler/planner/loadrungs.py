"""The model-loading rungs: roles served by a model loaded on a shared server (PURE).

§2 Ollama (a runtime that ``loads_models`` on a ``shared_endpoint``) is never
launched: a managed role loads and unloads its tag there, never pulls, and
unloads only what we loaded, never blind, and never while another wanted role
serves the same model. ``ollama`` is the rung for such a role;
``ollama_release`` is what a stopped or removed one lets go. ``served`` and
``serving`` say which wanted roles name the same model on one server (they
are resident together); ``tag_of`` is the tag a role names.
"""

from __future__ import annotations

from typing import Mapping

from reconciler.core import ownership
from reconciler.planner import generations, policy
from reconciler.planner.generations import tag_of
from reconciler.core.decisions import Load, Reason, Status, Unload, Verb
from reconciler.core.desired import ModelSpec, RoleSpec, WantedState
from reconciler.planner.ledger import Draft
from reconciler.core.observed import Health
from reconciler.planner.rungs import Role, backoff, draft, terminal
from reconciler.runtimes import SPECS, spec_of


def served(roles, models) -> dict[tuple[str, int], list[tuple[str, set[str]]]]:
    """Per shared server (host, port): each model named there, with the wanted roles naming it.

    One resident model is the residency of every role that names it: such
    roles are in memory together or not at all, so the ledger keeps their
    exclusions as one, and none of them unloads it while another wants it.
    """
    by_server: dict[tuple[str, int], list[tuple[str, set[str]]]] = {}
    for spec in roles:
        runtime = SPECS[spec.runtime]  # (the table itself: every role of every pass)
        name = tag_of(spec, models) if runtime.shared_endpoint and spec.wanted else None
        if name:
            here = by_server.setdefault((spec.serve.host, spec.serve.port), [])
            group = next((g for named, g in here if runtime.same(named, name)), None)
            if group is None:
                here.append((name, {spec.name}))
            else:
                group.add(spec.name)
    return by_server


def serving(by_server, host: str, port: int, name: str, runtime) -> frozenset[str]:
    """The wanted roles naming model ``name`` on the shared server at host:port."""
    return next((frozenset(g) for named, g in by_server.get((host, port), ())
                 if runtime.same(named, name)), frozenset())


def ollama_release(r: Role, reason: Reason) -> Draft:
    """§2 unload only what we loaded, and never blind; otherwise nothing to undo."""
    rec, probe = r.record, r.obs.probe
    if ownership.our_load(rec):
        assert rec is not None
        if probe is None or probe.health not in (Health.UP, Health.UNHEALTHY):
            return draft(r, Verb.KEEP, Reason.UNKNOWN, Status.UNKNOWN,
                         f"Ollama not answering; {rec.model_tag} is not unloaded blind",
                         holds=rec.reserved)
        if r.sharing and spec_of(rec.runtime).lists(probe.resident_models, rec.model_tag):
            # Another role wants the same model: unloading it would evict that
            # role; it stays loaded, and stays ours, until the last one lets go.
            serve = "serves" if len(r.sharing) == 1 else "serve"
            return draft(r, Verb.KEEP, reason, Status.STOPPED,
                         f"{rec.model_tag} stays loaded: {', '.join(sorted(r.sharing))} {serve} it",
                         release=rec.reserved)
        if spec_of(rec.runtime).lists(probe.resident_models, rec.model_tag):
            return draft(r, Unload(tag=rec.model_tag), reason, Status.RUNNING,
                         f"{rec.model_tag} resident; we loaded it", release=rec.reserved)
    if reason is Reason.REMOVED:
        return draft(r, Verb.FORGET, reason, Status.STOPPED, "nothing of ours is resident",
                     release=r.reserved)
    return draft(r, Verb.KEEP, Reason.ABSENT, Status.STOPPED,
                 "state: stopped; nothing of ours is resident", release=r.reserved)


def ollama(r: Role, models, now: float) -> Draft:
    """§2 managed Ollama: load/unload one tag on a server we never launch."""
    spec, rec, probe = r.spec, r.record, r.obs.probe
    assert spec is not None
    tag = tag_of(spec, models)
    # §4 state: stopped → unload what we loaded.
    if spec.state is WantedState.STOPPED:
        return ollama_release(r, Reason.STATE_STOPPED)
    if rec is not None and rec.terminal is not None and not r.operator and not r.fresh:
        return terminal(r, rec)
    # Unknown is not down: never act blind on an Ollama that does not answer.
    if probe is None or probe.health in (Health.UNREACHABLE, Health.NOT_PROBED):
        return draft(r, Verb.KEEP, Reason.UNKNOWN, Status.DEGRADED,
                     r.probe_detail("Ollama not answering") + "; nothing is done blind",
                     holds=r.reserved or None)
    if probe.health is Health.LOADING:
        return draft(r, Verb.KEEP, Reason.LOADING, Status.LOADING, "a load is in flight",
                     retry_in=policy.POLL, holds=r.reserved or spec.memory.footprint)
    # Answering, but /api/tags or /api/ps failed: its lists cannot be trusted,
    # so an empty one is no eviction and no missing pull. Unknown is not down.
    if probe.health is not Health.UP:
        return draft(r, Verb.KEEP, Reason.UNKNOWN, Status.DEGRADED,
                     r.probe_detail("Ollama answers badly") + "; nothing is done on it",
                     holds=r.reserved or None)
    ours = ownership.loaded_by_us(rec)
    # A changed tag: unload the old tag we loaded first; the new one loads next pass.
    # If the new tag is resident already (whoever loaded it), it serves this role
    # now: the role still holds, and what it excludes stays out (§7).
    if (ownership.our_load(rec) and not spec_of(spec.runtime).same(rec.model_tag, tag)
            and not r.sharing and spec_of(spec.runtime).lists(probe.resident_models, rec.model_tag)):
        resident = spec_of(spec.runtime).lists(probe.resident_models, tag)
        return draft(r, Unload(tag=rec.model_tag), Reason.SPEC_CHANGED, Status.RUNNING,
                     f"tag changed to {tag}", why=f"tag {rec.model_tag} → {tag}",
                     release=rec.reserved, holds=spec.memory.footprint if resident else None)
    # §2 never pull: a tag that is not pulled is refused.
    if not spec_of(spec.runtime).lists(probe.listed_models, tag):
        msg = f"{tag} is not pulled; the reconciler never pulls"
        return draft(r, Verb.REFUSE, Reason.NOT_PULLED, Status.REFUSED, msg, why=msg,
                     release=r.reserved)
    load = Load(tag=tag, keep_alive=spec.keep_alive, reserve=spec.memory.footprint,
                generation=r.generation, restarted_at=spec.restarted_at)
    polled = dict(release=r.reserved, retry_in=policy.POLL)
    if spec_of(spec.runtime).lists(probe.resident_models, tag):
        if r.fresh and ownership.our_load(rec) and spec_of(spec.runtime).same(rec.model_tag, tag):
            # §4 a new generation of our resident model (keep_alive, restarted_at):
            # the load is sent again, which sets the new keep_alive.
            return draft(r, load, Reason.SPEC_CHANGED, Status.RUNNING,
                         f"{tag} resident; a new generation", why=generations.load_changes(rec, spec, tag),
                         holds=r.reserved or spec.memory.footprint, **polled)
        return draft(r, Verb.KEEP, Reason.IN_SYNC, Status.RUNNING, f"{tag} resident",
                     holds=r.reserved or spec.memory.footprint)
    if r.fresh:
        # §4 a new generation is a fresh start: no hold, no backoff, loaded now.
        return draft(r, load, Reason.SPEC_CHANGED, Status.LOADED, f"{tag} not resident",
                     why=generations.load_changes(rec, spec, tag), **polled)
    # §2/§4 evicted behind our back (by a client or Ollama's scheduler): a
    # reload counts against the restart policy, with backoff, like a crash.
    if ours and not r.operator and spec_of(spec.runtime).same(rec.model_tag, tag):
        held = backoff(r, rec.exited_at if rec.exited_at is not None else now, now,
                       f"{tag} evicted", "reload")
        if held is not None:
            return held
        n, most = r.restarts + 1, r.policy.max_restarts
        return draft(r, load, Reason.EVICTED, Status.EXITED, f"{tag} evicted behind our back",
                     why=f"reload {n} of {most}", restarts=n, holds=rec.reserved, **polled)
    # §4 a load of ours that failed is retried with backoff and counted, like
    # a crashed start: polling is not backoff.
    if rec is not None and rec.exited_at is not None and not r.operator:
        held = backoff(r, rec.exited_at, now, f"loading {tag} failed", "load")
        if held is not None:
            return held
        n, most = r.restarts + 1, r.policy.max_restarts
        return draft(r, load, Reason.MISSING, Status.EXITED, f"loading {tag} failed before",
                     why=f"load attempt {n + 1}; retry {n} of {most}", restarts=n, **polled)
    # §2 wanted, pulled, not resident → load.
    return draft(r, load, Reason.MISSING, Status.LOADED, f"{tag} not resident", **polled)
