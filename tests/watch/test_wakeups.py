"""The daemon's one wait (``daemon/wakeups.py``): each source answers a ``Wake`` saying why."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord
from reconciler.core.observed import flat_record
from reconciler.daemon.wakeups import Cause, Deadline, Wake, Wakeups, targets_from
from reconciler.world import procs


@pytest.fixture
def wakeups():
    w = Wakeups()
    yield w
    w.close()


def soon(seconds: float = 5.0, why: Cause = Cause.RESYNC) -> Deadline:
    return Deadline(at=time.monotonic() + seconds, why=why)


def test_the_deadline_wakes_with_its_own_cause(wakeups):
    """Nothing else happening: the deadline's cause (resync or requeue) is the reason."""
    wake = wakeups.wait(soon(0.05, Cause.REQUEUE))
    assert wake == Wake(reasons=("requeue",), causes=frozenset({Cause.REQUEUE}))


def test_requests_from_any_thread_are_named_once_each(wakeups):
    """A pass request and demand poked before the wait: one wake naming both, in order."""
    wakeups.request_demand()
    wakeups.request_pass()
    wakeups.request_demand()
    wake = wakeups.wait(soon())
    assert not wake.stop
    assert wake.causes == {Cause.REQUESTED, Cause.DEMAND}
    assert sorted(wake.reasons) == ["demand", "requested"]


def test_a_stop_request_wins_over_a_pass_request(wakeups):
    """A stop poked beside a pass request stops: the daemon leaves, no pass."""
    wakeups.request_pass()
    wakeups.request_stop()
    wake = wakeups.wait(soon())
    assert wake.stop and Cause.STOP in wake.causes and not wake.reasons


def test_a_watched_server_exit_names_its_role(wakeups):
    """A pidfd firing wakes with the role that exited, as the log writes it."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert wakeups.watch_exits({"chat": (child.pid, procs.create_time(child.pid))}) == ()
        if not wakeups.exits.supported:
            pytest.skip(reason="no pidfds here")
        child.kill()
        wake = wakeups.wait(soon())
        assert wake.exited == ("chat",) and wake.reasons == ("chat exited",)
        assert wake.causes == {Cause.EXIT}
    finally:
        child.kill()
        child.wait()


def test_sighup_through_the_wakeup_fd_is_a_pass_and_sigterm_a_stop(wakeups):
    """Signals reach the wait through their wake-up fd: SIGHUP a pass, SIGTERM a stop."""
    wakeups.install_signals()  # the test runs on the main thread
    os.kill(os.getpid(), signal.SIGHUP)
    assert wakeups.wait(soon()).causes == {Cause.SIGHUP}
    os.kill(os.getpid(), signal.SIGTERM)
    assert wakeups.wait(soon()).stop


def test_targets_are_managed_roles_the_store_calls_running():
    """Only managed records with a pid and no observed exit are watched."""
    def rec(name, **kw):
        kw.setdefault("mode", Mode.MANAGED)
        return flat_record(name=name, instance_id=f"{name}-1", runtime=Runtime.LLAMACPP, **kw)

    records = [rec("up", pid=10, create_time=1.0), rec("dead", pid=11, create_time=1.0,
               exited_at=5.0), rec("never"), rec("adopted", mode=Mode.ADOPTED, pid=12)]
    assert targets_from(records) == {"up": (10, 1.0)}
