"""A killed pass's unfinished work: the intent written before acting, and its end (PURE).

Before the first signal or spawn of an action the shell writes the role's
record with an ``Intent`` (``with_intent``): what it is about to do, to which
pid, and until when that pid's exit is still its own doing. A reconciler
killed in the middle leaves that record; the next pass reads it as the work
finished (``finish_interrupted``, in ``plan`` and in ``records.after_decision``),
so our own stop is never counted as a crash (§3, §4).
"""

from __future__ import annotations

import attrs

from reconciler.core.decisions import Decision, Reason, Verb
from reconciler.core.observed import Intent, RoleObservation, RoleRecord, Terminal


#: How long past its stop_grace a server signalled by a killed pass may take to
#: exit and still have its exit counted as ours (the SIGKILL never came).
EXIT_MARGIN = 10.0


def intent_of(decision: Decision, now: float, stop_grace: float = 0.0) -> Intent:
    """What the executor is about to do for ``decision`` (written before it does it)."""
    launch = decision.launch
    return Intent(verb=str(decision.verb), reason=str(decision.reason),
                  instance_id=decision.instance_id or decision.role,
                  launch_digest=launch.digest if launch is not None else None,
                  port=decision.port or 0, at=now, stops=decision.pid,
                  until=now + stop_grace + EXIT_MARGIN if decision.pid is not None else now)


def with_intent(record: RoleRecord, decision: Decision, now: float,
                stop_grace: float) -> RoleRecord:
    """``record`` as written right before acting on ``decision``: with its intent.

    A start is planned only for a role that runs nothing, so a pid its record
    still names is a dead server the plan has already accounted for (a killed
    run's own stop, finished by ``finish_interrupted`` in the plan's view only).
    It is dropped in the same write: otherwise a run killed before the spawn
    would leave that dead pid without the intent that explained it, and the
    next pass would count it as a crash.
    """
    intent = intent_of(decision, now, stop_grace)
    if decision.verb is Verb.START:
        return attrs.evolve(record, process=None, intent=intent)
    return attrs.evolve(record, intent=intent)


def finish_interrupted(record: RoleRecord, observation: RoleObservation,
                       now: float) -> RoleRecord:
    """A record a killed pass left mid-work, as if that work had finished (§4).

    When the intent stopped our live server (a stop, or a restart's stop) and
    that server is gone now, its exit was our own doing, not a crash: nothing
    is counted and no backoff starts; the role is simply not running (the next
    decision starts it as missing). An exposed server's stop holds the role
    ``stopped-exposed``, as the finished stop would have. A server the intent
    signalled that is still alive may still be exiting from that SIGTERM (the
    killed pass never sent the SIGKILL): the intent is kept until
    ``intent.until`` (stop_grace and a margin after it was written), so that
    exit is not taken for a crash either. Any other intent (a spawn the pass
    never recorded: re-adoption or the orphan sweep finds its process; a stop
    never sent, its server alive past ``until``) is dropped.
    """
    intent = record.intent
    if intent is None:
        return record
    process = observation.process
    alive = process is not None and process.owned and process.alive
    ours = intent.stops is not None and intent.stops == record.pid
    if alive and ours and now < intent.until:
        return record  # maybe still exiting from our SIGTERM: decided on a later pass
    record = attrs.evolve(record, intent=None)
    if alive or not ours:
        return record
    done = attrs.evolve(record, process=None, exited_at=None, healthy_since=None, reserved=0)
    if intent.verb == Verb.STOP and intent.reason == Reason.EXPOSED:
        return attrs.evolve(done, terminal=Terminal.STOPPED_EXPOSED,
                            terminal_detail="reachable beyond loopback; stopped")
    return done
