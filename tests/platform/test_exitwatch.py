"""The exit-watch contract (``seam.ExitWatch``): real processes, really killed, seen to end.

The daemon runs a pass the moment a managed server exits (§4), also one an earlier
run started (not our child). Each implementation registers in the daemon's
selector; a kill is seen within ``BOUND`` seconds; a pid whose process has another
create time than the recorded one has exited (a reused pid); a gone server is
reported once, never in a hot loop.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from reconciler.platform import pollwatch
from reconciler.platform.seam import TAG, ExitWatch

#: Seconds from the kill to the selector firing: pidfds and kqueue at once; polling within
#: its period. (macos runs only where select.kqueue exists: its watch says so elsewhere.)
BOUND = {"linux": 0.5, "portable": 1.0, "macos": 0.5}


@pytest.fixture
def watch(platform, selector):
    w = platform.exit_watch(selector)
    if not w.supported:
        pytest.skip(reason=w.unsupported_reason)
    yield w
    w.close()


@pytest.fixture
def started(spawn, platform):
    """A `sleep` (our child, or an orphan's) and its (pid, create time)."""
    def start(*, orphan: bool = False) -> tuple[int, float]:
        if orphan:
            pid = spawn(orphan=True)
        else:
            pid = spawn().pid
        return pid, platform.processes.create_time(pid)
    return start


def ready(sel, timeout: float) -> list:
    return [key.data for key, _ in sel.select(timeout)]


def fired(watch, sel, timeout: float) -> tuple:
    """Everything the watch's ready registrations say ended, within ``timeout``."""
    out = ()
    for data in ready(sel, timeout):
        assert data[0] == TAG
        out += watch.fired(data)
    return out


def test_it_answers_the_protocol(watch):
    """Each implementation answers every method of the Protocol."""
    assert isinstance(watch, ExitWatch)


@pytest.mark.parametrize("orphan", [False, True], ids=["child", "not-our-child"])
def test_a_kill_is_seen_within_the_bound(platform, watch, selector, started, orphan):
    """A SIGKILLed server is seen to end within BOUND, whether or not it is our child."""
    target = started(orphan=orphan)
    assert watch.sync({"chat": target}) == ()
    assert watch.watched == {"chat": target}
    assert fired(watch, selector, 0.05) == ()
    killed = time.monotonic()
    os.kill(target[0], signal.SIGKILL)
    assert fired(watch, selector, 3.0) == (("chat", target),)
    assert time.monotonic() - killed < BOUND[platform.name]
    assert watch.watched == {} and fired(watch, selector, 0.05) == ()


def test_a_zombie_has_ended(platform, watch, selector, spawn):
    """A killed child not yet reaped (a zombie) has ended: its memory is free to count."""
    child = spawn()
    target = (child.pid, platform.processes.create_time(child.pid))
    watch.sync({"chat": target})
    os.kill(child.pid, signal.SIGKILL)
    assert fired(watch, selector, 3.0) == (("chat", target),)
    assert child.returncode is None  # nobody reaped it: it was a zombie when seen


def test_another_create_time_is_an_exit_reported_once(watch, started):
    """A pid now held by a process with another create time has exited; said once."""
    pid, ctime = started()
    assert watch.sync({"chat": (pid, ctime - 100.0)}) == ("chat",)
    assert watch.watched == {}
    assert watch.sync({"chat": (pid, ctime - 100.0)}) == ()


def test_a_dead_pid_is_reported_gone_once(watch, spawn, platform):
    """A recorded pid that no longer exists is reported once, then never again."""
    child = spawn()
    target = (child.pid, platform.processes.create_time(child.pid))
    child.kill()
    child.wait()
    assert watch.sync({"chat": target}) == ("chat",)
    assert watch.sync({"chat": target}) == ()


def test_a_fired_server_is_not_watched_again(watch, selector, started):
    """After it fired, a store that still names the pid does not re-arm it (no hot loop)."""
    target = started()
    watch.sync({"chat": target})
    os.kill(target[0], signal.SIGKILL)
    assert fired(watch, selector, 3.0) == (("chat", target),)
    assert watch.sync({"chat": target}) == ()
    assert fired(watch, selector, 0.3) == ()


def test_sync_follows_the_store(watch, selector, started):
    """Roles leave the watch when they leave the targets; a new pid replaces the old one;
    a server that left the watch is not reported when it ends; close unregisters all."""
    a, b, c = started(), started(), started()
    watch.sync({"chat": a, "coder": b})
    assert watch.watched == {"chat": a, "coder": b}
    watch.sync({"chat": c})
    assert watch.watched == {"chat": c}
    os.kill(a[0], signal.SIGKILL)
    assert fired(watch, selector, 0.5) == ()
    watch.close()
    assert len(selector.get_map()) == 0


def test_the_polling_period_is_short():
    """The portable watch looks at least ten times a second (the bound above rests on it)."""
    assert pollwatch.POLL_PERIOD <= 0.1


def test_the_pidfd_watch_says_when_pidfds_are_missing(selector, monkeypatch):
    """Without os.pidfd_open the Linux watch says so and watches nothing (resync notices)."""
    from reconciler.platform import linux

    monkeypatch.delattr(os, "pidfd_open", raising=False)
    w = linux.PidfdExitWatch(selector)
    assert not w.supported and "pidfd_open" in w.unsupported_reason
    assert w.sync({"chat": (os.getpid(), 0.0)}) == ()
