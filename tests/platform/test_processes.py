"""The process-table contract (``seam.ProcessTable``), the same on every implementation.

A real child is started, its facts read (the ones ``core/ownership`` judges), and
killed for real: a recorded process is only ever the one with the recorded create
time (§3: a recycled pid is not ours), a zombie is not alive, a gone pid has no facts.
"""

from __future__ import annotations

import os
import signal
import time

from reconciler.core import ownership
from reconciler.platform.seam import DENIED, ProcessTable
from tests.platform.conftest import wait_for


def test_it_is_a_process_table(platform):
    """Each implementation answers every method of the Protocol."""
    assert isinstance(platform.processes, ProcessTable)


def test_a_live_child_s_facts(platform, spawn):
    """pid, create time, marker, group (it leads its own), uid, cwd, argv, environment."""
    table = platform.processes
    before = time.time()
    child = spawn(marker="chat-0000aaaa")
    created = table.create_time(child.pid)
    assert created is not None and before - 1.0 <= created <= time.time() + 1.0
    assert child.pid in table.pids()
    seen = table.recorded(child.pid, created, proof=True)
    assert seen is not None and seen is not DENIED
    assert (seen.pid, seen.marker, seen.pgid, seen.uid) == (
        child.pid, "chat-0000aaaa", child.pid, os.getuid())
    assert seen.cwd == table.cwd(child.pid) and seen.cwd.endswith("/chat-0000aaaa-0")
    assert table.pgid(child.pid) == child.pid
    assert table.cmdline(child.pid) == tuple(child.args)
    assert table.environ(child.pid)["RECONCILER_INSTANCE"] == "chat-0000aaaa"
    assert table.look(child.pid).marker == "chat-0000aaaa"
    assert table.rss(child.pid) > 0
    assert not table.exiting(child.pid, created)
    assert 0 < table.boot_time() <= created
    assert ownership.owned(table.recorded(child.pid, created, marker=True), child.pid, created,
                           "chat-0000aaaa")


def test_only_what_is_asked_is_read(platform, spawn):
    """Without ``marker`` or ``proof`` the marker is not read (``is_running`` on every stop step)."""
    child = spawn()
    created = platform.processes.create_time(child.pid)
    seen = platform.processes.recorded(child.pid, created)
    assert seen.marker is None and seen.cwd is None


def test_another_create_time_is_another_process(platform, spawn):
    """§3: the pid with another create time than the recorded one is not the recorded process."""
    child = spawn()
    created = platform.processes.create_time(child.pid)
    assert platform.processes.recorded(child.pid, created - 100.0, marker=True) is None
    assert platform.processes.recorded(child.pid, None) is None
    assert not platform.processes.exiting(child.pid, created - 100.0)


def test_a_killed_child_is_a_zombie_then_gone(platform, spawn):
    """SIGKILLed and not yet reaped it is not alive; reaped, it has no facts left."""
    table = platform.processes
    child = spawn()
    created = table.create_time(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    assert wait_for(lambda: table.recorded(child.pid, created) is None, timeout=5.0)
    assert table.look(child.pid) is None
    child.wait()
    assert table.create_time(child.pid) is None
    assert table.recorded(child.pid, created, proof=True) is None
    assert table.look(child.pid) is None and table.cmdline(child.pid) is None
    assert table.environ(child.pid) is None and table.cwd(child.pid) is None
    assert table.rss(child.pid) is None and table.pgid(child.pid) is None


def test_a_process_of_another_user_is_looked_at_or_denied(platform):
    """pid 1 (init, maybe another user's, in a container maybe half readable): each answer
    is a fact, "denied" or None, never a raise; another create time is never it."""
    table = platform.processes
    created = table.create_time(1)
    if created is None:
        return  # not even its start may be read here: nothing more to ask
    assert table.recorded(1, created) is not None  # alive, whatever else may be read
    table.recorded(1, created, proof=True)
    table.cmdline(1), table.environ(1), table.cwd(1), table.look(1, proof=True)
    assert table.recorded(1, created + 100.0) is None
