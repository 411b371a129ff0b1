"""How the store's memory of a role follows from a decision and its outcome (PURE).

The planner decides; the executor acts; this module says what the state
store must remember afterwards so that the *next* pass decides correctly:
when an exit was first observed (the backoff clock) and how the server
ended (its ``ExitInfo``, kept until the next start), the restart count
(including the stable_after reset the planner already applied), terminal
states, reservations in the ledger and Ollama ``we_loaded``.

``None`` means "forget this role": nothing of it is left to remember.

What a record holds follows what the role is (``core/observed.RoleRecord``):
a start writes its ``process`` part (pid and create time, together) and every
end of that server drops it whole; a load writes its ``load`` part (the tag,
ours) and an unload or a client's load keeps the tag but not the ownership; an
intent is held only while its action is in flight.

Every start, restart and load records the generation it ran (§4), whether
it worked or not: a new generation is a fresh start, and a failed attempt of
it must not look new again on the next pass. A record that still holds an
``Intent`` was left by a killed pass (``intents.finish_interrupted``).

``after_decision`` does what every verb shares (a skipped action, an intent
to finish, a role's first record) and hands the rest to the verb's own small
function, chosen by ``step_of`` with a ``match`` on the decision's payload: a
new verb is one new function and one case there.

Size: the steps every verb shares and one small function per verb (``step_of``),
each with the rule of behaviour.md it keeps.
"""

from __future__ import annotations

from typing import Callable, assert_never

import attrs

from reconciler.core import ownership
from reconciler.planner import liveness
# The intent rules are re-exported: what the store remembers, from one import.
from reconciler.planner.intents import (  # noqa: F401
    EXIT_MARGIN, finish_interrupted, intent_of, with_intent)
from reconciler.core.decisions import (
    Act, Decision, Forget, GiveUp, Keep, Load, Reason, Refuse, Restart, Start, Status, Stop,
    Unload, Verb, Wait)
from reconciler.core.desired import Mode, RoleSpec
from reconciler.core.observed import (
    Health, Liveness, LoadedModel, RoleObservation, RoleRecord, ServerProcess, Terminal)
from reconciler.runtimes import spec_of


@attrs.frozen(kw_only=True)
class ActionFacts:
    """What the executor reports about one acted decision."""

    ok: bool
    skipped: bool = False  # not attempted (an earlier stop failed): nothing happened
    exited: bool = False  # a stopped process is really gone
    pid: int | None = None
    create_time: float | None = None
    #: §5 after start: the new server listened beyond loopback on these
    #: addresses, and was stopped within the same pass (it is gone).
    exposed: tuple[str, ...] = ()


def new_record(spec: RoleSpec, decision: Decision) -> RoleRecord:
    """The first record of a role the reconciler starts to remember."""
    return RoleRecord(
        name=spec.name,
        instance_id=decision.instance_id or spec.name,
        runtime=spec.runtime,
        mode=spec.mode,
        host=spec.serve.host,
        port=spec.serve.port,
        load=LoadedModel(tag=decision.model_tag) if decision.model_tag else None,
    )


def after_decision(
    record: RoleRecord | None,
    spec: RoleSpec | None,
    decision: Decision,
    observation: RoleObservation,
    facts: ActionFacts | None,
    now: float,
) -> RoleRecord | None:
    """The record to store after ``decision`` (and, when it acted, ``facts``).

    What every verb shares is here (a skipped action, an intent to finish, a
    first record, the current address); what each verb changes is one function
    the verb's own (``step_of``).
    """
    if facts is not None and facts.skipped:
        return record  # never attempted: no crash, no count, nothing changed
    if record is not None:
        # An intent this pass wrote is done with once its outcome is known; one a
        # killed run left (no action now) is finished as that run would have.
        record = (attrs.evolve(record, intent=None) if facts is not None
                  else finish_interrupted(record, observation, now))
    if record is None:
        if spec is None:
            return None
        if decision.verb in (Verb.START, Verb.LOAD) or (
            spec.mode is Mode.ADOPTED and decision.verb is Verb.KEEP
        ):
            record = new_record(spec, decision)
        else:
            return None  # refusals and waits of never-started roles leave no trace
    elif spec is not None:
        # Keep the address current: a stop after an edit must find the server.
        record = attrs.evolve(record, host=spec.serve.host, port=spec.serve.port)
    return step_of(decision.act)(_After(record=record, spec=spec, decision=decision,
                                      observation=observation, facts=facts, now=now))


@attrs.frozen(kw_only=True)
class _After:
    """One verb's inputs: the record so far, the decision, what acting on it did, the look."""

    record: RoleRecord
    spec: RoleSpec | None
    decision: Decision
    observation: RoleObservation
    facts: ActionFacts | None
    now: float

    @property
    def acted(self) -> ActionFacts:
        """What the executor reported (an acting verb always has it)."""
        assert self.facts is not None
        return self.facts


def _started(a: _After) -> RoleRecord | None:
    """START, RESTART: the new server's pid and launch, or a failed spawn counted as a crash."""
    record, decision, facts, now = a.record, a.decision, a.acted, a.now
    launch = decision.launch
    if isinstance(decision.act, Restart) and not facts.exited and decision.act.replaces is not None:
        # The old server could not be stopped (or the restart was refused
        # before stopping it): it still runs, as recorded. Keep it all.
        return record
    # (A crashed server's restart that was refused before spawning falls
    # through as a failed spawn: counted, with backoff, towards gave-up.)
    record = _attempted(record, decision)
    if not facts.ok:
        # A failed spawn is a crash at once: the backoff clock starts now,
        # so a broken launcher is retried with delays, not in a hot loop.
        return attrs.evolve(
            record, process=None, exited_at=now, healthy_since=None,
            restarts=decision.restarts, reserved=decision.reserve, devices=decision.devices,
            exit=None,  # nothing ran: the outcome says why (the old exit is stale now)
        )
    if facts.exposed:
        # §5 after start: it listened beyond loopback and was stopped at once.
        return attrs.evolve(
            record, mode=Mode.MANAGED, process=None, exited_at=None,
            healthy_since=None, launch_digest=launch.digest if launch else None,
            launch_argv=launch.argv if launch else (),
            instance_id=decision.instance_id or record.instance_id,
            terminal=Terminal.STOPPED_EXPOSED,
            terminal_detail=f"listening on {', '.join(facts.exposed)}",
            restarts=decision.restarts, reserved=0,
        )
    return attrs.evolve(
        record,
        # Ours now, whatever the role was when first remembered (adopted, say):
        # a later removal must stop it, not forget it.
        mode=Mode.MANAGED, runtime=decision.runtime or record.runtime,
        process=ServerProcess(pid=facts.pid, create_time=facts.create_time)
        if facts.pid is not None else None,
        launch_digest=launch.digest if launch else record.launch_digest,
        launch_argv=launch.argv if launch else record.launch_argv,
        instance_id=decision.instance_id or record.instance_id,
        started_at=now, exited_at=None, healthy_since=None,  # (no hold: _attempted)
        restarts=decision.restarts, reserved=decision.reserve, devices=decision.devices,
        exit=None, liveness=Liveness(),  # a new server: nothing ended, nothing failed yet
    )


def _stopped(a: _After) -> RoleRecord | None:
    """STOP: gone is forgotten (removed), a failed start (startup timeout), terminal or stopped."""
    record, decision, facts, now, reason = a.record, a.decision, a.acted, a.now, a.decision.reason
    if not (facts.ok and facts.exited):
        return record  # still there: keep everything, memory included
    if reason is Reason.REMOVED:
        return None
    if reason is Reason.STARTUP_TIMEOUT:
        # A failed start, like a crash: the backoff clock starts now and
        # the reservation is kept across the backoff (§7).
        return attrs.evolve(record, process=None, exited_at=now, healthy_since=None)
    stopped = attrs.evolve(
        record, process=None, exited_at=None, healthy_since=None, reserved=0,
        exit=None, liveness=Liveness(),
    )
    if reason is Reason.EXPOSED:
        return attrs.evolve(
            stopped, terminal=Terminal.STOPPED_EXPOSED,
            terminal_detail=decision.why or decision.detail,
        )
    return stopped


def _loaded(a: _After) -> RoleRecord | None:
    """LOAD: the load is ours now (``we_loaded``), or a failed load releases its memory."""
    record, decision, facts, now = a.record, a.decision, a.acted, a.now
    load = decision.act
    assert isinstance(load, Load)  # (``step_of``: only a load comes here)
    record = _attempted(record, decision)
    if not facts.ok:
        # A failed Ollama load releases its reservation (BEHAVIOUR §7).
        return attrs.evolve(record, exited_at=now, reserved=0, restarts=decision.restarts)
    return attrs.evolve(
        record, mode=Mode.MANAGED, runtime=decision.runtime or record.runtime,
        load=LoadedModel(tag=load.tag, ours=True), started_at=now,
        exited_at=None, healthy_since=None, terminal=None, terminal_detail="",
        restarts=decision.restarts, reserved=decision.reserve,
    )


def _unloaded(a: _After) -> RoleRecord | None:
    """UNLOAD: nothing of ours is resident any more (forgotten when the role was removed)."""
    record, facts, reason = a.record, a.acted, a.decision.reason
    if not facts.ok:
        return record
    if reason is Reason.REMOVED:
        return None
    return attrs.evolve(record, load=_not_ours(record.load), reserved=0, exited_at=None)


def _forgotten(a: _After) -> RoleRecord | None:
    """FORGET: nothing is left to remember."""
    return None


def _gave_up(a: _After) -> RoleRecord | None:
    """GIVE_UP: terminal ``gave-up``, how the server ended kept, its memory released."""
    record, decision, observation, now = a.record, a.decision, a.observation, a.now
    return attrs.evolve(
        record, process=None, reserved=0,
        exited_at=record.exited_at or now, exit=record.exit or observation.exit,
        terminal=Terminal.GAVE_UP, terminal_detail=decision.detail or decision.why,
    )


def _looked(a: _After) -> RoleRecord | None:
    """KEEP, WAIT, REFUSE: nothing acted; the clocks and the liveness counters may move."""
    return _checked(_observed(a.record, a.decision, a.observation, a.now), a.spec,
                    a.observation, a.now)


#: What the store remembers after each verb: one small function per verb.
def step_of(act: Act) -> Callable[[_After], RoleRecord | None]:
    """The verb's own step, by its payload: every verb has one (no verb falls through)."""
    match act:
        case Start() | Restart():
            return _started
        case Stop():
            return _stopped
        case Load():
            return _loaded
        case Unload():
            return _unloaded
        case Forget():
            return _forgotten
        case GiveUp():
            return _gave_up
        case Keep() | Wait() | Refuse():
            # (§1.6 a fetch is a Model's, ``Plan.fetches``, never a role's decision: a
            # role waiting for one is a WAIT.)
            return _looked
        case _:
            assert_never(act)


def _checked(record: RoleRecord, spec: RoleSpec | None, observation: RoleObservation,
             now: float) -> RoleRecord:
    """§4.1 the liveness counters after this pass's look (the planner decided from the same)."""
    if spec is None or spec.liveness is None:
        return record
    process = observation.process
    alive = process is not None and process.owned and process.alive
    if not (alive or (not spec.managed and observation.probe is not None)):
        return record
    started = record.started_at if spec.managed else None
    counters = liveness.look(spec.liveness, record.liveness, observation.probe, started, now)
    return record if counters == record.liveness else attrs.evolve(record, liveness=counters)


def _attempted(record: RoleRecord, decision: Decision) -> RoleRecord:
    """A start, restart or load was tried: no hold is left, and the count belongs to its generation.

    (A hold is only ever passed by an operator start or a new generation: either way
    a failed attempt is a crash of the generation it tried, not the old hold.)
    """
    record = attrs.evolve(record, terminal=None, terminal_detail="")
    if decision.generation is None:
        return record
    return attrs.evolve(record, generation=decision.generation,
                        restarted_at=decision.restarted_at)


def _observed(
    record: RoleRecord, decision: Decision, observation: RoleObservation, now: float
) -> RoleRecord:
    """Keep / wait / refuse: nothing acted, but the clocks may move."""
    process = observation.process
    dead = record.pid is not None and (process is None or not (process.owned and process.alive))
    ollama_gone = (
        spec_of(record.runtime).loads_models and ownership.loaded_by_us(record)
        and decision.reason in (Reason.EVICTED, Reason.BACKOFF)
    )
    if decision.release:
        # A refused restart, a held terminal role, a stopped role that is not
        # running: the planner released their bytes in the ledger; so does the store.
        record = attrs.evolve(record, reserved=max(0, record.reserved - decision.release))
    if decision.reason is Reason.TERMINAL:
        return record
    if (spec_of(record.runtime).loads_models and decision.reason is Reason.IN_SYNC
            and record.exited_at is not None):
        # Resident again, but not by a load of ours (a client loaded it): the
        # residency is not ours to unload, and its next eviction is no crash.
        return attrs.evolve(record, load=_not_ours(record.load), exited_at=None,
                            restarts=decision.restarts)
    if dead or ollama_gone or decision.reason is Reason.BACKOFF:
        # The backoff clock starts when the exit is first observed. The pid
        # stays recorded: it says "we started this and it died" (a crash, not
        # a never-started role); ownership checks keep a recycled pid safe.
        return attrs.evolve(
            record, healthy_since=None,
            exited_at=record.exited_at or (observation.process.exit_observed_at
                                           if observation.process else None) or now,
            exit=record.exit or observation.exit,  # how it ended, kept until the next start
            restarts=decision.restarts,
        )
    if decision.reason in (Reason.UNKNOWN, Reason.UNHEALTHY, Reason.LOADING,
                           Reason.UNRESPONSIVE):
        # stable_after counts continuous answering: a stall starts it over.
        record = attrs.evolve(record, healthy_since=None)
    probe = observation.probe
    answering = probe is not None and probe.health is Health.UP
    if decision.status is Status.RUNNING and answering and record.healthy_since is None:
        record = attrs.evolve(record, healthy_since=now)
    return attrs.evolve(record, restarts=decision.restarts)


def _not_ours(load: LoadedModel | None) -> LoadedModel | None:
    """The load part once the model is no longer resident by our load (its tag kept)."""
    return attrs.evolve(load, ours=False) if load is not None and load.ours else load
