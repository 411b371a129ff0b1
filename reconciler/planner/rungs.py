"""The parts every rung of the decision ladder is built from (PURE).

``Role`` is everything the ladder knows about one role this pass (``plan``
builds it); ``draft`` turns a rung's verdict into the ``Draft`` the ledger
places. Here too are the gates and holds more than one rung shares:
``start`` (a start or restart: a foreign port, the model checks,
``model_refusal``), ``backoff`` (§4 wait out delay(restarts), or give up),
``terminal`` (§4 gave-up and stopped-exposed hold until an operator start),
``changes`` (the words for a new generation). The rung modules (``plan``,
``loadrungs``, ``demandrungs``, ``livenessrungs``) import from here, never
the other way round.

Size: the role's view and the one funnel every verdict goes through (``draft``,
with its memo of steady drafts) belong together; the gates are small and
shared by several rung modules, so they live beside them.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from reconciler.planner import generations, launches, policy
from reconciler.planner.launches import Bound, Prepared
from reconciler.core.decisions import (
    Act, Decision, Forget, GiveUp, Keep, Reason, Refuse, Restart, Start, Status, Stop, Target, Verb,
    Wait, decided)
from reconciler.core.desired import (Launch, ProgramSpec, RestartPolicy, RoleSpec, Runtime,
                                      program_key)
from reconciler.core.devices import Assignment
from reconciler.planner.ledger import CLAIMS, Draft
from reconciler.planner.placement import Claim
from reconciler.runtimes import spec_of
from reconciler.core.observed import (
    Health,
    Intent,
    ModelState,
    RoleObservation,
    RoleRecord,
    Terminal,
)
from reconciler.core.positional import by_position
from reconciler.core.units import format_duration


@attrs.define
class Role:
    """Everything the ladder knows about one role this pass.

    Never changed after it is built, but not frozen: it never leaves the
    planner, and a frozen class costs twice as much to build, once per role
    per pass (``bench/bench_plan.py``). Built by position (``views.view``, its
    one maker): CPython passes more than 15 keyword arguments through a dict,
    and that call cost ~2.5 µs per role per pass, as much as the rest of the view.
    """

    name: str
    spec: RoleSpec | None
    record: RoleRecord | None
    obs: RoleObservation
    launcher: Bound  # this pass's launches (kept across passes: launches.py)
    prepared: Prepared | None  # this role's, before placement (None: a removed role)
    policy: RestartPolicy
    running: bool  # our own process: owned and alive
    restarts: int  # count carried into this pass (after resets)
    operator: bool  # named by `reconcile start`
    sharing: frozenset[str]  # other wanted roles serving the Ollama model we loaded for this one
    # What every decision about the role says, whatever its verb:
    runtime: Runtime
    port: int
    host: str
    instance_id: str
    process: Target | None  # our own live process, the one a stop/restart targets
    kept: Keep  # a keep of it (kept across passes: ``stages/views``)
    owner_id: str | None  # the instance id that process was started with
    generation: str | None  # what the role runs now (§4), None: nothing to run
    fresh: bool  # a new generation: the record's holds, backoff and count do not apply
    interrupted: Intent | None  # a killed pass's stop of our server, finished by this one
    # What the role's launch says (the memo's ``prepared``; None for a removed role), read
    # into slots once: the rungs, the ladder and placement read them several times per role.
    argv: tuple[str, ...] | None  # the launch of a managed server (None: never launched)
    digest: str | None
    #: §7.1 the devices the launch is built with before placement (None: host-only, or a
    #: count request placement has yet to pick).
    assignment: Assignment | None
    claim: Claim | None  # §7.1 what a claim asks of the devices
    reserved: int  # the bytes its record holds in the ledger (0: no record)
    why: str = ""  # the plan-line detail every decision carries unless it says its own

    def launch(self) -> Launch:
        """The whole launch, built only for the decisions that carry it (start/restart)."""
        assert self.argv is not None and self.prepared is not None and self.spec is not None
        return self.launcher.launch(self.spec, self.prepared)

    @property
    def resident_hold(self) -> int | None:
        """What a crashed server keeps across its backoff: its bytes, its devices (None: nothing)."""
        rec = self.record
        if rec is None:
            return None
        return rec.reserved if rec.reserved or (rec.devices and rec.pid is not None) else None

    @property
    def health(self) -> Health | None:
        return self.obs.probe.health if self.obs.probe is not None else None

    def probe_detail(self, fallback: str) -> str:
        probe = self.obs.probe
        return probe.detail if probe is not None and probe.detail else fallback


def draft(r: Role, verb: Verb | Act, reason: Reason, status: Status, detail: str, *,
          holds: int | None = None, keeps: bool = False, claim: Claim | None = None,
          why: str | None = None, release: int = 0, retry_in: float | None = None,
          restarts: int | None = None,
          devices: tuple[tuple[str, int], ...] | None = None) -> Draft:
    """A rung's verdict as a draft. ``verb``: a verb that carries nothing but the role's
    live process (stop, keep, wait, refuse, give-up, forget), or the payload of one that
    carries more (``Start``, ``Restart``, ``Load``, ``Unload``). Unsaid: ``why`` is the
    role's, ``restarts`` its count, ``devices`` those it holds (with ``holds``).

    Every field named (no ``**kw``): a decision is built per role per pass, and a call
    through a dict of keywords cost twice what the decision does."""
    held = r.record.devices if holds is not None and r.record is not None else ()
    why = r.why if why is None else why
    restarts = r.restarts if restarts is None else restarts
    devices = held if devices is None else devices  # §7.1 what it holds (a claim's: placed later)
    if verb is Verb.KEEP:
        act, steady = r.kept, True
    elif isinstance(verb, Verb):
        act, steady = _OF_ROLE[verb](r.process), False
    else:  # a claim whose launch placement builds (§7.1) is decided there: this is its carrier
        act, steady = verb, type(verb) in _CARRIED and verb.launch is None
    if steady:  # the same draft as the last pass's, if it is one
        was = _STEADY.get(r.name)
        if was is not None and _same(was, act, r, reason, status, detail, holds, keeps, claim,
                                     why, release, retry_in, restarts, devices, held):
            return was
    decision = decided(r.name, act, reason, why, status, detail, r.runtime, r.port, r.host,
                       r.instance_id, release, retry_in, restarts, devices)
    made = Draft(decision=decision, holds=holds, keeps_on_refusal=keeps, devices=held,
                 claim=claim)
    if steady:
        if len(_STEADY) >= launches.LIMIT:
            _STEADY.clear()
        _STEADY[r.name] = made
    return made


#: role → its last keep's draft (a running role in sync, loading, adopted…), or its last
#: claim's whose devices placement picks (the decision placement builds replaces it: the
#: carrier is built once, not once per pass while the claim waits or is refused): most
#: roles keep, pass after pass, with the same fields; the same (frozen) decision is handed
#: out again rather than a new one built and left alive for the collector (bounded as
#: ``launches.LIMIT`` bounds its tables). ``_same`` compares every field ``draft`` sets.
_STEADY: dict[str, Draft] = {}
#: The payloads of a claim placed on devices placement picks (``start``: launch None).
_CARRIED = (Start, Restart)


def forget() -> None:
    """Empty ``_STEADY`` (``plan.forget``)."""
    _STEADY.clear()


def _same(was: Draft, act: Act, r: Role, reason, status, detail, holds, keeps, claim, why,
          release, retry_in, restarts, devices, held) -> bool:
    """Would ``draft`` build ``was`` again? Every field it sets, compared (identity first)."""
    d = was.decision
    return (d.act, d.reason, d.status, d.detail, d.why, d.runtime, d.port, d.host,
            d.instance_id, d.release, d.retry_in, d.restarts, d.devices, was.holds,
            was.devices, was.keeps_on_refusal, was.claim) == (
        act, reason, status, detail, why, r.runtime, r.port, r.host, r.instance_id,
        release, retry_in, restarts, devices, holds, held, keeps, claim)


def _stop(process: Target | None) -> Stop:
    assert process is not None, "a stop of a role without a live process of ours"
    return Stop(target=process)


#: The payloads of the verbs that carry nothing but the role's live process (built by
#: position: one per role per pass, ``core/positional``).
_OF_ROLE = {
    Verb.STOP: _stop,
    Verb.KEEP: by_position(Keep),  # (``draft`` reads the role's own: ``Role.kept``)
    Verb.WAIT: by_position(Wait),
    Verb.REFUSE: by_position(Refuse),
    Verb.GIVE_UP: lambda process: GiveUp(),
    Verb.FORGET: lambda process: Forget(),
}
#: Start and restart by position (launch, [replaces,] reserve, generation, restarted_at).
_START, _RESTART = by_position(Start), by_position(Restart)


def changes(r: Role) -> str:
    assert r.record is not None
    program = r.prepared.program if r.prepared is not None else None
    return generations.launch_changes(r.record, r.spec, r.argv, r.digest, fresh=r.fresh,
                                      owner_id=r.owner_id, instance_id=r.instance_id,
                                      devices=r.assignment.ids if r.assignment else (),
                                      program=program,
                                      before=_ran_before(r) if program is not None else None)


def _ran_before(r: Role) -> ProgramSpec | None:
    """§14 the Program the record's launch ran, when this node still declares it: the one
    at its argv[0], else (the same path, another version) the one whose label gives the
    record's digest (the record keeps the argv, not the environment)."""
    assert r.record is not None and r.spec is not None
    launcher, old = r.launcher.launcher, r.record.launch_argv
    if not old or r.argv is None or r.prepared is None:
        return None
    if old[0] != r.argv[0]:
        return launcher.by_executable.get(old[0])
    for other in launcher.programs_at(old[0]):
        role = attrs.evolve(r.spec, program=other.name)
        if launcher.digest(old, r.prepared.instance_id, r.prepared.extra_env,
                           role) == r.record.launch_digest:
            return other
    return None


def started(r: Role) -> float | None:
    return r.record.started_at if r.record is not None else None


def terminal(r: Role, rec: RoleRecord) -> Draft:
    status = Status.GAVE_UP if rec.terminal is Terminal.GAVE_UP else Status.STOPPED_EXPOSED
    detail = rec.terminal_detail or f"{rec.terminal}; run `reconcile start {r.name}`"
    if r.running:
        # Held, yet our process is alive (it came back, or a stop never took):
        # it is resident, so it keeps its memory and its exclusions.
        footprint = r.spec.host_need if r.spec is not None else 0
        return draft(r, Verb.KEEP, Reason.TERMINAL, status, detail + "; its process is alive",
                     why=str(rec.terminal), holds=max(rec.reserved, footprint))
    return draft(r, Verb.KEEP, Reason.TERMINAL, status, detail, why=str(rec.terminal),
                 release=rec.reserved)


def backoff(r: Role, exited: float, now: float, what: str, attempt: str,
            said: str = "") -> Draft | None:
    """§4 after an exit (or eviction): give up at max, else wait out delay(restarts).

    ``what`` happened (``exited (code 1)``), and ``said``: the line that says why.
    """
    assert r.record is not None
    n, most = r.restarts, r.policy.max_restarts
    state = policy.retry(n, exited, now, r.policy)
    because = f": {said}" if said else ""
    # §4 max restarts reached and dead → gave-up (terminal, releases memory).
    if state.gave_up:
        return draft(r, Verb.GIVE_UP, Reason.MAX_RESTARTS, Status.GAVE_UP,
                     f"{what} after {n} restart{'' if n == 1 else 's'} (max_restarts {most})"
                     f"{because}; run `reconcile start {r.name}`", release=r.reserved)
    # §4 backoff: the clock starts when the exit was first observed.
    if state.left > 0:
        left = format_duration(state.left)
        return draft(r, Verb.WAIT, Reason.BACKOFF, Status.BACKOFF,
                     f"{what}{because}; {attempt} {n + 1} of {most} in {left}",
                     why=f"{what}{because}; retry in {left}" if said else f"retry in {left}",
                     retry_in=state.left, holds=r.resident_hold)
    return None


def start(r: Role, checks, verb: Verb, reason: Reason, status: Status, detail: str, *,
          why: str = "", restarts: int | None = None, keeps: bool = False) -> Draft:
    """Gates shared by start and restart: foreign port, model checks; memory comes later."""
    spec = r.spec
    assert spec is not None and r.argv is not None
    kept = r.reserved if keeps else None
    release = 0 if keeps else r.reserved
    # §4 never start over a port something else accepts connections on.
    if r.obs.port_taken:
        msg = f"port {spec.serve.port} already taken; adopt it instead"
        return draft(r, Verb.REFUSE, Reason.PORT_TAKEN, Status.REFUSED, msg, why=msg,
                     release=release, holds=kept)
    refused = model_refusal(r, checks, release=release, kept=kept)
    if refused is not None:
        return refused
    # A crashed server keeps its reservation (its bytes, its devices).
    held = r.reserved if keeps else r.resident_hold
    # §7.1 a claim whose devices placement picks gets its launch then; one built on them keeps it.
    claim, assignment, need = r.claim, r.assignment, spec.host_need
    picks = claim is not None and assignment is None
    act: Start | Restart | None
    if verb is Verb.START:  # a start or restart: built once, kept with its launch
        if (act := r.prepared.start) is None:
            act = r.prepared.start = _START(None if picks else r.launch(), need, r.generation,
                                            spec.restarted_at)
    elif (act := r.prepared.restart) is None or act.replaces is not r.process:
        act = r.prepared.restart = _RESTART(None if picks else r.launch(), r.process, need,
                                            r.generation, spec.restarted_at)
    return draft(r, act, reason, status, detail, why=why, claim=claim,
                 devices=assignment.pairs() if assignment else None, release=r.reserved,
                 retry_in=policy.POLL, restarts=r.restarts if restarts is None else restarts,
                 holds=held, keeps=keeps)


def model_refusal(r: Role, checks, *, release: int, kept: int | None) -> Draft | None:
    """§1.1 only verified weights are served (unverified: the executor verifies first); §14
    a Program whose files changed is not started (the executor found it; cleared once fixed)."""
    spec = r.spec
    assert spec is not None
    if not checks:
        return None  # nothing hashed yet (a plan-only run): the executor verifies first
    assert r.prepared is not None
    program = r.prepared.program  # (``Launcher.pinned``, kept with the launch)
    for name in (spec.model, *spec.serve.weight_refs,
                 program_key(program.name) if program is not None else None):
        check = checks.get(name) if name else None
        if check is None or check.state not in _BAD_MODEL:
            continue
        if program is not None and name == program_key(program.name):  # §14
            return draft(r, Verb.REFUSE, Reason.PROGRAM_UNVERIFIED, Status.REFUSED,
                         check.detail, why=check.detail, release=release, holds=kept)
        detached = check.state is ModelState.DETACHED
        msg = (f"model store is detached ({name})" if detached
               else f"model {name} {check.state}" + (f": {check.detail}" if check.detail else ""))
        return draft(r, Verb.REFUSE, Reason.MODEL_UNVERIFIED,
                     Status.DEGRADED if detached else Status.REFUSED, msg, why=msg,
                     release=release, holds=kept)
    return None


_BAD_MODEL = (ModelState.MISMATCH, ModelState.MISSING, ModelState.DETACHED)


def placed_launch(roles: Mapping[str, Role], d: Decision, got: Assignment) -> Decision:
    """§7.1 a placed claim's decision (``roles``: by name): its devices, and a launch that
    follows them: built with the devices the role ran on, again with any others picked."""
    r, pairs = roles[d.role], got.pairs()
    if r.spec is None or not pairs or (r.assignment is not None and r.assignment.ids == got.ids):
        return d if d.devices == pairs else d.placed(pairs, d.act)
    prepared = r.launcher.placed(r.spec, got, r.instance_id)
    act, generation = d.act, prepared.generation  # (``generations.current`` of its digest)
    if isinstance(act, Start):  # (as ``start``'s: spec.host_need, spec.restarted_at; kept)
        if prepared.start is None:
            prepared.start = _START(r.launcher.launch(r.spec, prepared), act.reserve,
                                    generation, act.restarted_at)
        return d.placed(pairs, prepared.start)
    assert isinstance(act, Restart), d
    return d.placed(pairs, _RESTART(r.launcher.launch(r.spec, prepared), act.replaces,
                                    act.reserve, generation, act.restarted_at))
