"""Records of §4 generations, interrupted work, startup grace and §5 exposure after start."""

from __future__ import annotations

import attrs

from reconciler.core.decisions import Decision, Reason, Verb, flat
from reconciler.core.desired import Launch, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import Intent, ProcessFacts, RoleObservation, RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.planner.records import (
    EXIT_MARGIN,
    ActionFacts,
    after_decision,
    finish_interrupted,
    intent_of,
)

SPEC = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                serve=ServeSpec(port=8090))
LAUNCH = Launch(argv=("/srv", "--port", "8090"), env=(), cwd="/d/chat-1", run_as=None,
                digest="new")
RUNNING = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                     mode=Mode.MANAGED, port=8090, pid=10, create_time=1.0,
                     launch_digest="old", restarts=1, started_at=5.0, reserved=100)
NOTHING = RoleObservation(name="chat")
GONE = RoleObservation(name="chat", process=ProcessFacts(pid=10, create_time=1.0, alive=False, owned=True))
LIVE = RoleObservation(name="chat", process=ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True))


def decide(verb, reason, **kw) -> Decision:
    if verb is Verb.STOP:
        kw.setdefault("pid", 10)  # RUNNING's: a stop names the process it targets
    if "pid" in kw:
        kw.setdefault("create_time", 1.0)  # (whole: pid, create time, marker)
    return flat(role="chat", verb=verb, reason=reason, instance_id="chat-1", **kw)


def test_a_failed_start_of_a_new_generation_records_that_generation():
    """A new generation's failed start clears the hold and counts under the new generation."""
    held = attrs.evolve(RUNNING, process=None, terminal=Terminal.GAVE_UP, generation="g1")
    d = decide(Verb.START, Reason.SPEC_CHANGED, launch=LAUNCH, reserve=100, restarts=0,
               generation="g2", restarted_at="b")
    after = after_decision(held, SPEC, d, NOTHING, ActionFacts(ok=False), 60.0)
    assert (after.terminal, after.generation, after.restarted_at) == (None, "g2", "b")
    assert after.exited_at == 60.0 and after.restarts == 0


def test_startup_timeout_is_a_failed_start():
    """A stop for startup_timeout starts the backoff clock and keeps the reservation."""
    d = decide(Verb.STOP, Reason.STARTUP_TIMEOUT, pid=10)
    after = after_decision(RUNNING, SPEC, d, LIVE, ActionFacts(ok=True, exited=True), 70.0)
    assert (after.pid, after.exited_at, after.reserved) == (None, 70.0, 100)


def test_a_new_server_found_exposed_is_held_stopped_exposed():
    """§5 after start: the start's facts say exposed → nothing runs, the role is held."""
    d = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100, restarts=0)
    facts = ActionFacts(ok=True, pid=42, create_time=9.5, exposed=("0.0.0.0:8090",))
    after = after_decision(None, SPEC, d, NOTHING, facts, 50.0)
    assert after.terminal is Terminal.STOPPED_EXPOSED and after.pid is None
    assert after.reserved == 0 and "0.0.0.0:8090" in after.terminal_detail


def test_an_interrupted_restart_whose_stop_happened_is_not_a_crash():
    """Intent stopped pid 10, pid 10 is gone: the record forgets it, counts nothing, no clock."""
    intent = intent_of(decide(Verb.RESTART, Reason.SPEC_CHANGED, pid=10, launch=LAUNCH), 40.0)
    assert (intent.stops, intent.launch_digest, intent.at) == (10, "new", 40.0)
    left = attrs.evolve(RUNNING, intent=intent)
    done = finish_interrupted(left, GONE, 50.0)
    assert (done.pid, done.exited_at, done.restarts, done.intent) == (None, None, 1, None)
    assert done.terminal is None


def test_an_intent_whose_server_still_runs_past_its_window_is_only_dropped():
    """The server lives past stop_grace and the margin: the stop never took; the record stays."""
    left = attrs.evolve(RUNNING, intent=Intent(verb="stop", reason="removed",
                                               instance_id="chat-1", stops=10, until=30.0))
    assert finish_interrupted(left, LIVE, 30.0) == RUNNING


def test_a_server_still_exiting_from_our_sigterm_is_not_a_crash_later():
    """Alive within the window: the intent is kept, so its exit on a later pass is ours."""
    intent = intent_of(decide(Verb.STOP, Reason.REMOVED, pid=10), 20.0, stop_grace=5.0)
    assert intent.until == 20.0 + 5.0 + EXIT_MARGIN
    left = attrs.evolve(RUNNING, intent=intent)
    kept = finish_interrupted(left, LIVE, 21.0)
    assert kept == left
    after = after_decision(kept, SPEC, decide(Verb.KEEP, Reason.IN_SYNC, restarts=1), LIVE, None,
                           21.0)
    assert after.intent == intent, "a pass that does not act keeps a live target's intent"
    done = finish_interrupted(after, GONE, 22.0)
    assert (done.pid, done.exited_at, done.restarts, done.intent) == (None, None, 1, None)


def test_an_action_clears_the_intent_it_wrote():
    """Once this pass's action has an outcome, its own intent is gone from the record."""
    intent = intent_of(decide(Verb.STOP, Reason.STATE_STOPPED, pid=10), 20.0, stop_grace=5.0)
    left = attrs.evolve(RUNNING, intent=intent)
    after = after_decision(left, SPEC, decide(Verb.STOP, Reason.STATE_STOPPED, pid=10), LIVE,
                           ActionFacts(ok=True, exited=True), 21.0)
    assert after.intent is None and after.pid is None


def test_an_interrupted_exposed_stop_holds_the_role():
    """A killed pass's stop of an exposed server ends as the finished stop would: held."""
    left = attrs.evolve(RUNNING, intent=Intent(verb="stop", reason="exposed",
                                               instance_id="chat-1", stops=10))
    done = finish_interrupted(left, GONE, 50.0)
    assert done.terminal is Terminal.STOPPED_EXPOSED and done.pid is None


def test_an_intent_for_another_pid_never_clears_the_record():
    """An intent that stopped some other pid says nothing about the recorded server."""
    left = attrs.evolve(RUNNING, intent=Intent(verb="restart", reason="spec_changed",
                                               instance_id="chat-1", stops=99))
    done = finish_interrupted(left, GONE, 50.0)
    assert done.pid == 10 and done.intent is None


def test_a_start_intent_drops_the_dead_pid_it_was_planned_over():
    """Start after a killed run's finished stop, killed again before the spawn: no crash later."""
    from reconciler.planner.records import with_intent

    stopped = attrs.evolve(RUNNING, intent=Intent(verb="stop", reason="state_stopped",
                                                  instance_id="chat-1", stops=10, until=25.0))
    start = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100)
    left = with_intent(stopped, start, 30.0, 5.0)
    assert (left.pid, left.create_time, left.intent.verb) == (None, None, "start")
    again = finish_interrupted(left, NOTHING, 31.0)
    assert (again.pid, again.exited_at, again.restarts) == (None, None, 1)
    restart = decide(Verb.RESTART, Reason.SPEC_CHANGED, launch=LAUNCH, pid=10)
    assert with_intent(RUNNING, restart, 30.0, 5.0).pid == 10, "a restart's target stays named"


def test_a_killed_pass_gives_its_stop_stop_grace_plus_ten_seconds():
    """Rule (§4, the killed-pass stop margin): a server a killed pass sent SIGTERM may take
    stop_grace + 10 s to exit and its exit is still ours (no crash counted); alive after that,
    the stop never took and the intent is dropped. Checked by behaviour, in seconds."""
    intent = intent_of(decide(Verb.STOP, Reason.REMOVED, pid=10), 20.0, stop_grace=5.0)
    left = attrs.evolve(RUNNING, intent=intent)
    assert finish_interrupted(left, LIVE, 34.9) == left  # 14.9 s later: maybe still exiting
    assert finish_interrupted(left, LIVE, 35.0) == RUNNING  # 15 s: the stop never took
    exited = finish_interrupted(finish_interrupted(left, LIVE, 34.9), GONE, 60.0)
    assert (exited.pid, exited.exited_at, exited.restarts) == (None, None, 1), "not a crash"
    longer = intent_of(decide(Verb.STOP, Reason.REMOVED, pid=10), 20.0, stop_grace=30.0)
    assert finish_interrupted(attrs.evolve(RUNNING, intent=longer), LIVE, 59.9).intent == longer
