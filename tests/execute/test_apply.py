"""apply(): plan order, the executor's own guards, hooks, and skipping starts after a failed stop."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import attrs
import pytest

from reconciler.world import execute
from reconciler.core.ownership import MARKER_ENV
from reconciler.core.decisions import Decision, Plan, Reason, Stop, Target, Verb, flat
from reconciler.core.desired import NodeConfig
from reconciler.core.outcomes import Guard, Refusal

from .conftest import alive, wait_for

INSTANCE = "coder-1234abcd"
SLEEPER = "import time; time.sleep(60)"
NODE = NodeConfig(stop_grace=0.3)


class Recorder:
    """Hooks that record every call and register spawned pids for cleanup."""

    def __init__(self, world, refuse: Refusal | None = None) -> None:
        self.world, self.refuse, self.calls = world, refuse, []

    def before_start(self, decision):
        self.calls.append(("before_start", decision.role))
        return self.refuse

    def before_stop(self, decision):
        return None

    def before_act(self, decision):
        self.calls.append(("before_act", decision.role))

    def orphan_refusal(self, decision):
        self.calls.append(("orphan_refusal", decision.role))
        return self.refuse

    def after_spawn(self, decision, result):
        self.calls.append(("after_spawn", decision.role, result.pid))
        self.world.pids.append(result.pid)

    def after_stop(self, decision, outcome):
        self.calls.append(("after_stop", decision.role))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(world, *, role="coder", instance=INSTANCE, port=None, reserve=0, verb=Verb.START,
           reason=Reason.MISSING, **kw) -> Decision:
    return flat(
        role=role, verb=verb, reason=reason, host="127.0.0.1",
        port=port or _free_port(), instance_id=instance, reserve=reserve,
        launch=world.launch(SLEEPER, instance=instance), **kw,
    )


def _apply(decisions, hooks, allowed=lambda port: True):
    return execute.apply(Plan(decisions=tuple(decisions)), node=NODE, allowed=allowed, hooks=hooks)


def test_start_spawns_and_records_through_the_hooks(world):
    """A start checks with before_start, spawns, and reports pid and create time via after_spawn."""
    hooks = Recorder(world)
    decision = _start(world)
    (outcome,) = _apply([decision], hooks)
    assert outcome.ok and not outcome.skipped and outcome.verb is Verb.START
    assert outcome.pid and outcome.create_time
    assert alive(outcome.pid)
    # Read once the exec has settled: the parent learns the exec succeeded (its
    # close-on-exec pipe closes) a moment before the kernel has set up the new
    # image's environment block, and /proc/PID/environ reads empty until then.
    marker = f"{MARKER_ENV}={INSTANCE}".encode()
    environ = Path(f"/proc/{outcome.pid}/environ")
    assert wait_for(lambda: marker in environ.read_bytes().split(b"\0"), 5.0)
    assert hooks.calls == [("before_start", "coder"), ("before_act", "coder"),
                           ("after_spawn", "coder", outcome.pid)]
    assert outcome.text() == f"pid {outcome.pid}"
    assert abs(outcome.at - time.time()) < 5


def test_start_over_a_taken_port_spawns_nothing(world):
    """A foreign listener on the port: refused with 'adopt it instead', no spawn, no hook."""
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        hooks = Recorder(world)
        decision = _start(world, port=port)
        (outcome,) = _apply([decision], hooks)
    assert not outcome.ok and outcome.pid is None
    assert outcome.detail == f"port 127.0.0.1:{port} already taken; adopt it instead"
    assert outcome.refusal is None and hooks.calls == []
    assert not Path(decision.launch.cwd).exists()


def test_before_start_refusal_spawns_nothing(world):
    """A message from before_start (e.g. the model failed verification) stops the spawn."""
    refusal = Refusal(guard=Guard.MODEL_UNVERIFIED, detail="model coder-q4 mismatch")
    hooks = Recorder(world, refuse=refusal)
    decision = _start(world)
    (outcome,) = _apply([decision], hooks)
    assert not outcome.ok and outcome.refusal == refusal
    assert outcome.text() == "refused: model coder-q4 mismatch"
    assert not Path(decision.launch.cwd).exists()
    assert ("after_spawn", "coder", None) not in hooks.calls


@pytest.mark.parametrize("change,guard,text", [
    ({"instance_id": None}, Guard.NO_INSTANCE_ID, "refused: decision without instance_id"),
    ({"port": 80}, Guard.PORT_NOT_ALLOWED, "refused: port 80 is outside the allowed ports"),
    ({"host": "192.0.2.1"}, Guard.NOT_LOOPBACK, "refused: 192.0.2.1 is not a loopback address"),
    ({"instance_id": "other-00000000"}, Guard.NO_MARKER,
     f"refused: the launch does not carry {MARKER_ENV}=other-00000000"),
])
def test_guards_refuse_a_buggy_start(world, change, guard, text):
    """No instance id, a disallowed port, a non-loopback host or a launch without the marker: no spawn."""
    hooks = Recorder(world)
    decision = _start(world)
    decision = attrs.evolve(decision, **change)
    (outcome,) = _apply([decision], hooks, allowed=lambda port: port != 80)
    assert not outcome.ok and outcome.refusal.guard is guard and outcome.text() == text
    assert not Path(decision.launch.cwd).exists()


def test_failed_stop_skips_only_starts_that_reserve_memory(world):
    """A stop refused (pid not ours) keeps its memory: later reserving starts are skipped."""
    foreign = world.spawn(world.launch(SLEEPER, instance="someone-else"))
    assert foreign.ok
    stop = flat(role="old", verb=Verb.STOP, reason=Reason.REMOVED, pid=foreign.pid,
                    create_time=foreign.create_time, instance_id="old-00000000")
    big = _start(world, role="big", instance="big-00000000", reserve=10)
    small = _start(world, role="small", instance="small-00000000", reserve=0)
    hooks = Recorder(world)
    stopped, skipped, started = _apply([stop, big, small], hooks)
    assert not stopped.ok and not stopped.exited and stopped.detail.startswith("not owned:")
    assert skipped.skipped and not skipped.ok
    assert skipped.text() == "skipped: an earlier stop failed and its memory was counted"
    assert started.ok and started.pid
    time.sleep(0.4)  # longer than the grace: a wrongly sent SIGTERM would have acted
    assert alive(foreign.pid)
    assert [c[:2] for c in hooks.calls] == [("before_act", "old"), ("before_start", "small"),
                                            ("before_act", "small"), ("after_spawn", "small")]


def test_stop_without_recorded_create_time_cannot_be_built():
    """A stop names the process it targets whole (pid, create time, marker): one without the
    create time is an impossible decision, refused where it is built."""
    with pytest.raises(TypeError, match="has no create time"):
        flat(role="coder", verb=Verb.STOP, reason=Reason.REMOVED, pid=123, instance_id=INSTANCE)


def test_stop_without_recorded_create_time_sends_no_signal(world):
    """A stop whose target lacks the create time (the type forbids it; a buggy plan built
    around it) is refused before any signal: ownership is checked all the same."""
    target = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    decision = Decision(role="coder", reason=Reason.REMOVED, instance_id=INSTANCE,
                        act=Stop(target=Target(pid=target.pid, create_time=None,  # type: ignore
                                               owner_id=INSTANCE)))
    (outcome,) = _apply([decision], Recorder(world))
    assert not outcome.ok and outcome.refusal.guard is Guard.NO_CREATE_TIME
    assert "no signal sent" in outcome.text()
    time.sleep(0.4)
    assert alive(target.pid)


def test_restart_stops_the_old_process_and_starts_a_new_one(world):
    """A restart stops the owned process (gone → exited) and spawns the new launch."""
    old = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    decision = _start(world, verb=Verb.RESTART, reason=Reason.SPEC_CHANGED,
                      pid=old.pid, create_time=old.create_time)
    hooks = Recorder(world)
    (outcome,) = _apply([decision], hooks)
    assert outcome.ok and outcome.exited and outcome.pid not in (None, old.pid)
    assert not alive(old.pid) and alive(outcome.pid)
    assert "SIGKILL" not in outcome.detail  # python dies of SIGTERM at once


def test_restart_to_a_new_instance_id_stops_the_process_by_its_own_marker(world):
    """An edit of port/model/host changes the instance id; the old process is still stopped."""
    old = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    decision = _start(world, instance="coder-feedbeef", verb=Verb.RESTART,
                      reason=Reason.SPEC_CHANGED, pid=old.pid, create_time=old.create_time,
                      owner_id=INSTANCE)
    (outcome,) = _apply([decision], Recorder(world))
    assert outcome.ok and outcome.exited and not alive(old.pid) and alive(outcome.pid)


def test_restart_refused_by_verification_leaves_the_running_server_alone(world):
    """A new launch that fails before_start never costs the old server its life."""
    old = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    decision = _start(world, verb=Verb.RESTART, reason=Reason.SPEC_CHANGED,
                      pid=old.pid, create_time=old.create_time)
    hooks = Recorder(world, refuse=Refusal(guard=Guard.MODEL_UNVERIFIED,
                                           detail="model m: shard a.gguf hash mismatch"))
    (outcome,) = _apply([decision], hooks)
    assert not outcome.ok and not outcome.exited and alive(old.pid)
    assert outcome.text() == ("refused: model m: shard a.gguf hash mismatch; "
                              "the running server was left alone")


def test_refused_restart_of_a_crashed_server_blocks_no_later_start(world):
    """Nothing ran, so nothing held memory: a refused crash restart skips no start after it."""
    crashed = _start(world, role="flaky", instance="flaky-22222222", verb=Verb.RESTART,
                     reason=Reason.CRASHED, reserve=10)

    class RefuseFlaky(Recorder):
        def before_start(self, decision):
            super().before_start(decision)
            if decision.role != "flaky":
                return None
            return Refusal(guard=Guard.MODEL_UNVERIFIED, detail="model m: shard a.gguf is missing")

    later = _start(world, reserve=10)
    refused, started = _apply([crashed, later], RefuseFlaky(world))
    assert not refused.ok and "left alone" not in refused.text()
    assert started.ok and not started.skipped and alive(started.pid)


def test_a_start_on_devices_is_skipped_after_a_failed_stop(world):
    """§7.1: a start that reserves only device memory (no host bytes) waits too when an earlier
    stop did not free: the plan counted that stop's GPU memory as free for it."""
    foreign = world.spawn(world.launch(SLEEPER, instance="someone-else"))
    assert foreign.ok
    stop = flat(role="old", verb=Verb.STOP, reason=Reason.REMOVED, pid=foreign.pid,
                    create_time=foreign.create_time, instance_id="old-00000000")
    gpu = _start(world, role="gpu", instance="gpu-00000000", reserve=0,
                 devices=(("cuda:1", 10_000_000_000),))
    stopped, skipped = _apply([stop, gpu], Recorder(world))
    assert not stopped.exited
    assert skipped.skipped and not skipped.ok
    assert alive(foreign.pid)


def test_growing_restart_is_skipped_after_a_failed_stop(world):
    """A restart that claims more than it frees waits when an earlier stop freed nothing."""
    stranger = world.spawn(world.launch(SLEEPER, instance="other-00000000"))
    failed_stop = flat(role="old", verb=Verb.STOP, reason=Reason.REMOVED,
                           instance_id="old-11111111", pid=stranger.pid,
                           create_time=stranger.create_time, release=50)
    running = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    grow = _start(world, verb=Verb.RESTART, reason=Reason.SPEC_CHANGED, pid=running.pid,
                  create_time=running.create_time, reserve=100, release=60)
    stop_outcome, restart_outcome = _apply([failed_stop, grow], Recorder(world))
    assert not stop_outcome.exited and alive(stranger.pid)
    assert restart_outcome.skipped and alive(running.pid)


@pytest.mark.parametrize("reason,drained", [
    (Reason.SPEC_CHANGED, True), (Reason.UNRESPONSIVE, False), (Reason.STARTUP_TIMEOUT, False)])
def test_a_new_generation_is_drained_before_its_restart_a_hung_server_is_not(
        world, reason, drained):
    """§9 a restart for a new generation goes through the router's gate first (close, drain),
    as a stop does: a rolling update cuts no request (§12). A hung or never-ready server is
    not drained: what it holds would never finish."""
    running = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    restart = _start(world, verb=Verb.RESTART, reason=reason, pid=running.pid,
                     create_time=running.create_time)
    hooks = _Gated(world)
    (outcome,) = _apply([restart], hooks)
    assert outcome.ok and outcome.exited and not alive(running.pid)
    assert (("before_stop", "coder") in hooks.calls) is drained, hooks.calls
    if drained:  # the gate is asked while the old server still runs, before the new spawn
        spawned = next(i for i, c in enumerate(hooks.calls) if c[0] == "after_spawn")
        assert hooks.calls.index(("before_stop", "coder")) < spawned


class _Gated(Recorder):
    """A Recorder that also records the router's gate (``before_stop``)."""

    def before_stop(self, decision):
        self.calls.append(("before_stop", decision.role))
        return None


def test_non_acting_decisions_produce_no_outcome(world):
    """keep/wait/refuse decisions are not acted on and have no Outcome."""
    decisions = [flat(role=name, verb=verb, reason=Reason.IN_SYNC, instance_id=f"{name}-0")
                 for name, verb in (("a", Verb.KEEP), ("b", Verb.WAIT), ("c", Verb.REFUSE))]
    hooks = Recorder(world)
    assert _apply(decisions, hooks) == ()
    assert hooks.calls == []


def test_stop_of_a_process_already_gone_frees_its_memory(world):
    """A stop whose process already exited is ok and exited, so later starts go ahead."""
    gone = world.spawn(world.launch("pass", instance=INSTANCE))
    assert wait_for(lambda: not alive(gone.pid))
    stop = flat(role="coder", verb=Verb.STOP, reason=Reason.STATE_STOPPED, pid=gone.pid,
                    create_time=gone.create_time, instance_id=INSTANCE)
    start = _start(world, role="next", instance="next-00000000", reserve=10)
    stopped, started = _apply([stop, start], Recorder(world))
    assert stopped.ok and stopped.exited
    assert started.ok and not started.skipped


def test_a_stop_that_ends_its_server_is_recorded_before_the_next_start(world):
    """§7: after_stop comes right after the server is gone, before the start it made room for."""
    old = world.spawn(world.launch(SLEEPER, instance=INSTANCE))
    stop = flat(role="coder", verb=Verb.STOP, reason=Reason.EVICTED, pid=old.pid,
                    create_time=old.create_time, instance_id=INSTANCE, release=10)
    start = _start(world, role="next", instance="next-00000000", reserve=10)
    hooks = Recorder(world)
    stopped, started = _apply([stop, start], hooks)
    assert stopped.ok and stopped.exited and started.ok
    assert [c[:2] for c in hooks.calls] == [
        ("before_act", "coder"), ("after_stop", "coder"), ("before_start", "next"),
        ("before_act", "next"), ("after_spawn", "next")]
