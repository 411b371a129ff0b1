"""What the store remembers after each kind of decision (reconciler.records)."""

from __future__ import annotations

import attrs

from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.core.desired import Launch, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import flat_record
from reconciler.core.observed import (
    Health,
    ProbeFacts,
    ProcessFacts,
    RoleObservation,
    RoleRecord,
    Terminal,
)
from reconciler.planner.records import ActionFacts, after_decision

SPEC = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                serve=ServeSpec(port=8090))
LAUNCH = Launch(argv=("/srv", "--port", "8090"), env=(), cwd="/d/chat-1", run_as=None,
                digest="new")
RUNNING = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                     mode=Mode.MANAGED, port=8090, pid=10, create_time=1.0,
                     launch_digest="old", restarts=1, started_at=5.0, reserved=100)
NOTHING = RoleObservation(name="chat")


def decide(verb, reason, **kw) -> Decision:
    if verb is Verb.STOP:
        kw.setdefault("pid", 10)  # RUNNING's: a stop names the process it targets
    if "pid" in kw:
        kw.setdefault("create_time", 1.0)  # (whole: pid, create time, marker)
    return flat(role="chat", verb=verb, reason=reason, instance_id="chat-1", **kw)


def test_start_records_pid_launch_and_reservation():
    """A successful start remembers pid, create time, digest, argv and its reservation."""
    d = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100, restarts=0)
    after = after_decision(None, SPEC, d, NOTHING, ActionFacts(ok=True, pid=42, create_time=9.5), 50.0)
    assert (after.pid, after.create_time, after.launch_digest, after.launch_argv) == (
        42, 9.5, "new", LAUNCH.argv)
    assert (after.started_at, after.exited_at, after.reserved, after.restarts) == (50.0, None, 100, 0)


def test_failed_spawn_starts_the_backoff_clock():
    """A spawn that failed counts as an exit observed now, so it is retried with backoff."""
    d = decide(Verb.RESTART, Reason.CRASHED, launch=LAUNCH, reserve=100, restarts=2)
    after = after_decision(RUNNING, SPEC, d, NOTHING, ActionFacts(ok=False, exited=True), 60.0)
    assert after.pid is None and after.exited_at == 60.0 and after.restarts == 2


def test_restart_whose_stop_failed_keeps_the_running_record():
    """If the old server is still there, the record still describes it."""
    d = decide(Verb.RESTART, Reason.SPEC_CHANGED, launch=LAUNCH, reserve=100, restarts=1,
               pid=10)
    after = after_decision(RUNNING, SPEC, d, NOTHING, ActionFacts(ok=False, exited=False), 60.0)
    assert after == RUNNING


def test_refused_restart_of_a_crashed_server_counts_and_backs_off():
    """Nothing runs and the new launch was refused: counted and timed like a failed spawn."""
    dead = attrs.evolve(RUNNING, exited_at=40.0)
    d = decide(Verb.RESTART, Reason.CRASHED, launch=LAUNCH, reserve=100, restarts=2)
    after = after_decision(dead, SPEC, d, NOTHING, ActionFacts(ok=False, exited=False), 60.0)
    assert after.restarts == 2 and after.exited_at == 60.0 and after.pid is None


def test_a_skipped_action_changes_nothing():
    """A start the executor skipped (an earlier stop failed) is no crash and no count."""
    d = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100, restarts=0)
    assert after_decision(None, SPEC, d, NOTHING, ActionFacts(ok=False, skipped=True), 5.0) is None
    d = decide(Verb.RESTART, Reason.CRASHED, launch=LAUNCH, reserve=100, restarts=3)
    dead = attrs.evolve(RUNNING, exited_at=1.0)
    assert after_decision(dead, SPEC, d, NOTHING, ActionFacts(ok=False, skipped=True), 5.0) == dead


def test_stop_of_a_removed_role_forgets_it_but_only_once_gone():
    """A removed role is forgotten after its process is gone, kept while it lingers."""
    d = decide(Verb.STOP, Reason.REMOVED, pid=10)
    assert after_decision(RUNNING, None, d, NOTHING, ActionFacts(ok=True, exited=True), 1.0) is None
    lingering = after_decision(RUNNING, None, d, NOTHING, ActionFacts(ok=False), 1.0)
    assert lingering == RUNNING and lingering.reserved == 100


def test_exposed_stop_is_terminal_and_releases_memory():
    """Stopping an exposed server holds the role as stopped-exposed with nothing reserved."""
    d = decide(Verb.STOP, Reason.EXPOSED, why="listening on 0.0.0.0:8090")
    after = after_decision(RUNNING, SPEC, d, NOTHING, ActionFacts(ok=True, exited=True), 1.0)
    assert after.terminal is Terminal.STOPPED_EXPOSED and after.reserved == 0 and after.pid is None
    assert "0.0.0.0" in after.terminal_detail


def test_give_up_is_terminal_and_releases_memory():
    """gave-up keeps the count, releases the reservation and is terminal."""
    dead = attrs.evolve(RUNNING, process=None, exited_at=7.0)
    d = decide(Verb.GIVE_UP, Reason.MAX_RESTARTS, restarts=1, detail="crashed 1 times")
    after = after_decision(dead, SPEC, d, NOTHING, None, 9.0)
    assert after.terminal is Terminal.GAVE_UP and after.reserved == 0 and after.exited_at == 7.0


def test_first_observed_exit_sets_the_clock_once():
    """The backoff clock starts when the exit is first seen and is not moved later."""
    gone = RoleObservation(name="chat", process=ProcessFacts(pid=10, create_time=1.0,
                                                             alive=False, owned=False))
    d = decide(Verb.WAIT, Reason.BACKOFF, restarts=1, retry_in=4.0)
    first = after_decision(RUNNING, SPEC, d, gone, None, 100.0)
    assert first.exited_at == 100.0 and first.pid == 10  # still says: we started it
    later = after_decision(first, SPEC, d, NOTHING, None, 103.0)
    assert later.exited_at == 100.0


def test_healthy_since_is_set_when_first_answering():
    """stable_after is measured from the first answered probe after a start."""
    up = RoleObservation(name="chat",
                         process=ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True),
                         probe=ProbeFacts(health=Health.UP))
    d = decide(Verb.KEEP, Reason.IN_SYNC, status=Status.RUNNING, restarts=1)
    first = after_decision(RUNNING, SPEC, d, up, None, 20.0)
    assert first.healthy_since == 20.0
    assert after_decision(first, SPEC, d, up, None, 30.0).healthy_since == 20.0


def test_refusal_of_a_never_started_role_leaves_no_record():
    """Nothing is remembered for a role that was only refused."""
    d = decide(Verb.REFUSE, Reason.PORT_TAKEN, status=Status.REFUSED)
    assert after_decision(None, SPEC, d, NOTHING, None, 1.0) is None


def test_ollama_unload_clears_we_loaded_and_forget_deletes():
    """After an unload we no longer own the residency; forget drops the record."""
    loaded = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.OLLAMA,
                        mode=Mode.MANAGED, port=11434, model_tag="llama3.2:latest",
                        we_loaded=True, reserved=5)
    spec = RoleSpec(name="chat", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="l",
                    serve=ServeSpec(port=11434))
    d = decide(Verb.UNLOAD, Reason.STATE_STOPPED, model_tag="llama3.2:latest")
    after = after_decision(loaded, spec, d, NOTHING, ActionFacts(ok=True), 1.0)
    assert after.we_loaded is False and after.reserved == 0
    assert after_decision(loaded, None, decide(Verb.FORGET, Reason.REMOVED), NOTHING, None, 1.0) is None


def test_a_release_without_action_is_remembered():
    """A refused restart gives its reservation back in the store too."""
    dead = attrs.evolve(RUNNING, process=None, exited_at=5.0, reserved=100)
    d = decide(Verb.REFUSE, Reason.PORT_TAKEN, status=Status.REFUSED, release=100, restarts=1)
    after = after_decision(dead, SPEC, d, NOTHING, None, 9.0)
    assert after.reserved == 0


def test_a_stall_restarts_the_stable_after_clock():
    """A server that stops answering loses its healthy_since: stability must be continuous."""
    stable = attrs.evolve(RUNNING, healthy_since=20.0)
    up = RoleObservation(name="chat",
                         process=ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True),
                         probe=ProbeFacts(health=Health.UNREACHABLE))
    d = decide(Verb.KEEP, Reason.UNKNOWN, status=Status.DEGRADED, restarts=1)
    assert after_decision(stable, SPEC, d, up, None, 30.0).healthy_since is None


def test_a_start_makes_a_once_adopted_role_ours():
    """A role remembered as adopted and now started by us is recorded as managed (a removal stops it)."""
    adopted = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.MLX_LM,
                         mode=Mode.ADOPTED, port=8090)
    d = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100, restarts=0,
               runtime=Runtime.LLAMACPP)
    after = after_decision(adopted, SPEC, d, NOTHING, ActionFacts(ok=True, pid=42, create_time=9.5), 50.0)
    assert (after.mode, after.runtime, after.pid) == (Mode.MANAGED, Runtime.LLAMACPP, 42)


def test_a_load_makes_a_once_adopted_role_ours():
    """An Ollama role remembered as adopted and now loaded by us is recorded as managed."""
    adopted = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.OLLAMA,
                         mode=Mode.ADOPTED, port=11434)
    spec = RoleSpec(name="chat", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="l",
                    serve=ServeSpec(port=11434))
    d = decide(Verb.LOAD, Reason.MISSING, model_tag="llama3:8b", reserve=5,
               runtime=Runtime.OLLAMA)
    after = after_decision(adopted, spec, d, NOTHING, ActionFacts(ok=True), 50.0)
    assert (after.mode, after.we_loaded, after.model_tag, after.reserved) == (
        Mode.MANAGED, True, "llama3:8b", 5)


def test_a_first_load_is_remembered_as_ours():
    """A load of a role never remembered creates its record: we loaded the tag, and hold its memory."""
    spec = RoleSpec(name="chat", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="l",
                    serve=ServeSpec(port=11434))
    d = decide(Verb.LOAD, Reason.MISSING, model_tag="llama3:8b", reserve=5,
               runtime=Runtime.OLLAMA)
    after = after_decision(None, spec, d, NOTHING, ActionFacts(ok=True), 7.0)
    assert (after.we_loaded, after.model_tag, after.reserved, after.started_at) == (
        True, "llama3:8b", 5, 7.0)


def test_the_record_follows_the_address_the_manifest_gives():
    """After any decision the record holds the spec's host and port (the address the observer checks)."""
    d = decide(Verb.KEEP, Reason.IN_SYNC, status=Status.RUNNING, restarts=1)
    moved = attrs.evolve(SPEC, serve=ServeSpec(host="127.0.0.2", port=8091))
    after = after_decision(RUNNING, moved, d, NOTHING, None, 20.0)
    assert (after.host, after.port) == ("127.0.0.2", 8091)


def test_an_operator_start_clears_the_terminal_state():
    """A start that succeeds after gave-up leaves the role neither terminal nor counted."""
    gave_up = attrs.evolve(RUNNING, process=None, exited_at=7.0, terminal=Terminal.GAVE_UP,
                           terminal_detail="exited after 2 restarts", restarts=2, reserved=0)
    d = decide(Verb.START, Reason.MISSING, launch=LAUNCH, reserve=100, restarts=0)
    after = after_decision(gave_up, SPEC, d, NOTHING, ActionFacts(ok=True, pid=42, create_time=9.5), 50.0)
    assert (after.terminal, after.terminal_detail, after.restarts, after.exited_at) == (
        None, "", 0, None)


OLLAMA_SPEC = RoleSpec(name="chat", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="l",
                       serve=ServeSpec(port=11434))
LOADED = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.OLLAMA, mode=Mode.MANAGED,
                    port=11434, model_tag="llama3:8b", we_loaded=True, reserved=5, restarts=1)


def test_a_stop_that_leaves_the_process_keeps_everything():
    """A stop reported done but whose process is still there changes nothing: pid and memory stay."""
    d = decide(Verb.STOP, Reason.STATE_STOPPED, pid=10, release=100)
    after = after_decision(RUNNING, SPEC, d, NOTHING, ActionFacts(ok=True, exited=False), 1.0)
    assert after == RUNNING


def test_a_failed_load_releases_its_memory_and_starts_the_clock():
    """BEHAVIOUR §7: a failed Ollama load gives its reservation back; §4: it backs off from now."""
    d = decide(Verb.LOAD, Reason.EVICTED, model_tag="llama3:8b", reserve=5, restarts=2)
    evicted = attrs.evolve(LOADED, exited_at=3.0)
    after = after_decision(evicted, OLLAMA_SPEC, d, NOTHING, ActionFacts(ok=False), 9.0)
    assert (after.reserved, after.exited_at, after.restarts) == (0, 9.0, 2)


def test_a_load_over_a_record_makes_the_load_ours():
    """A load that succeeds is ours, even where the record said a client had loaded the tag."""
    clients = attrs.evolve(LOADED, load=attrs.evolve(LOADED.load, ours=False), reserved=0,
                           exited_at=3.0)
    d = decide(Verb.LOAD, Reason.MISSING, model_tag="llama3:8b", reserve=5, restarts=0)
    after = after_decision(clients, OLLAMA_SPEC, d, NOTHING, ActionFacts(ok=True), 9.0)
    assert (after.we_loaded, after.exited_at, after.reserved) == (True, None, 5)


def test_a_tag_resident_again_without_our_load_is_not_ours():
    """After our load left /api/ps, the tag back in memory was loaded by a client: never ours to unload."""
    gone = attrs.evolve(LOADED, exited_at=3.0)
    d = decide(Verb.KEEP, Reason.IN_SYNC, status=Status.RUNNING, restarts=1)
    after = after_decision(gone, OLLAMA_SPEC, d, NOTHING, None, 9.0)
    assert (after.we_loaded, after.exited_at) == (False, None)


def test_loading_or_unhealthy_restarts_the_stable_after_clock():
    """stable_after counts continuous answering: loading or unhealthy starts it over too."""
    stable = attrs.evolve(RUNNING, healthy_since=20.0)
    alive = RoleObservation(name="chat",
                            process=ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True),
                            probe=ProbeFacts(health=Health.LOADING))
    for reason, status in ((Reason.LOADING, Status.LOADING), (Reason.UNHEALTHY, Status.DEGRADED)):
        d = decide(Verb.KEEP, reason, status=status, restarts=1)
        assert after_decision(stable, SPEC, d, alive, None, 30.0).healthy_since is None


def test_an_evicted_model_waiting_out_its_backoff_keeps_its_clock():
    """§4: the clock of an eviction starts when first seen and does not move while it waits."""
    d = decide(Verb.WAIT, Reason.BACKOFF, restarts=1, retry_in=4.0)
    first = after_decision(LOADED, OLLAMA_SPEC, d, NOTHING, None, 100.0)
    assert first.exited_at == 100.0
    assert after_decision(first, OLLAMA_SPEC, d, NOTHING, None, 103.0).exited_at == 100.0


def test_a_hang_restarts_the_stable_after_clock():
    """Rule (§4/§4.1): a hang (liveness failing, though /health still says up) restarts the
    stable_after clock, so a hung server cannot win its restart count back by waiting."""
    stable = attrs.evolve(RUNNING, healthy_since=20.0)
    up = RoleObservation(name="chat",
                         process=ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True),
                         probe=ProbeFacts(health=Health.UP))
    d = decide(Verb.KEEP, Reason.UNRESPONSIVE, status=Status.DEGRADED, restarts=1)
    assert after_decision(stable, SPEC, d, up, None, 30.0).healthy_since is None
