"""pidfd exit notification: children, processes of earlier runs, recycled and dead pids."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

import pytest

from reconciler.daemon import pidwatch
from reconciler.world import procs
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")


@pytest.fixture
def selector():
    with selectors.DefaultSelector() as sel:
        yield sel


@pytest.fixture
def spawned():
    """Start `sleep` processes; kill every one at teardown."""
    pids: list[int] = []
    children: list[subprocess.Popen] = []

    def start(*, orphan: bool = False) -> tuple[int, float]:
        if orphan:
            # Not our child: like a server a previous reconciler run started.
            out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True)
            pid = int(out.stdout)
        else:
            child = subprocess.Popen(["sleep", "60"])
            children.append(child)
            pid = child.pid
        pids.append(pid)
        return pid, procs.create_time(pid)

    yield start
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for child in children:
        child.wait()


def fired(sel: selectors.BaseSelector, timeout: float) -> list:
    return [key.data for key, _ in sel.select(timeout)]


@pytest.mark.parametrize("orphan", [False, True], ids=["child", "not-our-child"])
def test_kill_is_noticed_at_once(selector, spawned, orphan):
    """A SIGKILLed server's pidfd fires within 0.5 s, whether or not it is our child."""
    target = spawned(orphan=orphan)
    watch = pidwatch.ExitWatch(selector)
    assert watch.sync({"chat": target}) == ()
    assert fired(selector, 0.05) == []
    killed = time.monotonic()
    os.kill(target[0], signal.SIGKILL)
    assert fired(selector, 2.0) == [(pidwatch.TAG, "chat")]
    assert time.monotonic() - killed < 0.5
    assert watch.exited("chat") == target
    assert watch.watched == {} and fired(selector, 0.05) == []


def test_recycled_pid_is_reported_gone_once(selector, spawned):
    """A pid whose create time differs from the record is not watched; it is reported once."""
    pid, ctime = spawned()
    watch = pidwatch.ExitWatch(selector)
    assert watch.sync({"chat": (pid, ctime - 100.0)}) == ("chat",)
    assert watch.watched == {}
    assert watch.sync({"chat": (pid, ctime - 100.0)}) == ()


def test_dead_pid_is_reported_gone_once(selector, spawned):
    """A recorded pid that no longer exists is reported once, then never again."""
    pid, ctime = spawned()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    watch = pidwatch.ExitWatch(selector)
    assert watch.sync({"chat": (pid, ctime)}) == ("chat",)
    assert watch.sync({"chat": (pid, ctime)}) == ()


def test_a_fired_pid_is_not_watched_again(selector, spawned):
    """After a pidfd fired, a store that still names the pid does not re-arm it (no hot loop)."""
    target = spawned()
    watch = pidwatch.ExitWatch(selector)
    watch.sync({"chat": target})
    os.kill(target[0], signal.SIGKILL)
    assert fired(selector, 2.0)
    watch.exited("chat")
    assert watch.sync({"chat": target}) == ()
    assert fired(selector, 0.05) == []


def test_sync_follows_the_store(selector, spawned):
    """Roles leave the watch when they leave the targets; a new pid replaces the old one."""
    a, b, c = spawned(), spawned(), spawned()
    watch = pidwatch.ExitWatch(selector)
    watch.sync({"chat": a, "coder": b})
    assert watch.watched == {"chat": a, "coder": b}
    watch.sync({"chat": c})
    assert watch.watched == {"chat": c}
    assert len(selector.get_map()) == 1
    watch.close()
    assert len(selector.get_map()) == 0


def test_targets_are_managed_roles_the_store_calls_running():
    """Only managed records with a pid and no observed exit are watched."""
    def rec(name, **kw):
        kw.setdefault("mode", Mode.MANAGED)
        return RoleRecord(name=name, instance_id=f"{name}-1", runtime=Runtime.LLAMACPP, **kw)

    records = [rec("up", pid=10, create_time=1.0), rec("dead", pid=11, create_time=1.0,
               exited_at=5.0), rec("never"), rec("adopted", mode=Mode.ADOPTED, pid=12)]
    assert pidwatch.targets_from(records) == {"up": (10, 1.0)}
