"""macOS's exit watch (``kqwatch.KqueueExitWatch``): one kqueue, ``EVFILT_PROC`` + ``NOTE_EXIT``.

Two halves. Here (no kqueue on Linux) its bookkeeping runs against a stand-in
kqueue that answers as the kernel is documented to (kqueue(2): adding a proc
filter for a pid that does not exist fails with ESRCH; a oneshot event is
dropped when delivered): a gone pid is reported once, a recycled pid is not
watched, an exit ends exactly its role and is not re-armed. On macOS (where
``select.kqueue`` exists) the same watch runs on the real kernel, on real
processes; those tests are skipped here, saying why, and have never run in this
project (no Mac). The contract suite (``test_exitwatch.py``) runs the ``macos``
platform's watch there too.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from reconciler.platform import kqwatch, macos
from reconciler.platform.seam import TAG, ExitWatch

ON_MAC = pytest.mark.skipif(not hasattr(select, "kqueue"),
                            reason="needs select.kqueue (macOS/BSD); never run in this project")


class _Event:
    def __init__(self, ident, filter, flags, fflags):  # noqa: A002 (select.kevent's names)
        self.ident, self.filter, self.flags, self.fflags = ident, filter, flags, fflags


class StandIn:
    """A module with ``kqueue``/``kevent`` and the constants, answering as kqueue(2) says."""

    KQ_FILTER_PROC, KQ_EV_ADD, KQ_EV_DELETE, KQ_EV_ONESHOT, KQ_NOTE_EXIT = -5, 1, 2, 16, 0x80000000

    def __init__(self):
        self.alive: set[int] = set()
        self.armed: set[int] = set()
        self.queued: list[_Event] = []
        self.queues = []

    def kevent(self, ident, filter, flags, fflags):  # noqa: A002
        return _Event(ident, filter, flags, fflags)

    def kqueue(self):
        outer = self

        class Queue:
            def __init__(self):
                self.r, self.w = os.pipe()
                os.set_blocking(self.r, False)
                outer.queues.append(self)

            def fileno(self):
                return self.r

            def control(self, changes, max_events, timeout=None):
                for ev in changes or ():
                    assert ev.filter == outer.KQ_FILTER_PROC and ev.fflags == outer.KQ_NOTE_EXIT
                    if ev.flags & outer.KQ_EV_ADD:
                        if ev.ident not in outer.alive:
                            raise ProcessLookupError(3, "No such process")
                        assert ev.flags & outer.KQ_EV_ONESHOT
                        outer.armed.add(ev.ident)
                    elif ev.flags & outer.KQ_EV_DELETE:
                        if ev.ident not in outer.armed:
                            raise FileNotFoundError(2, "No such file or directory")
                        outer.armed.discard(ev.ident)
                out, outer.queued = outer.queued[:max_events], outer.queued[max_events:]
                if not outer.queued:
                    try:
                        os.read(self.r, 4096)
                    except BlockingIOError:
                        pass
                return out

            def close(self):
                os.close(self.r)
                os.close(self.w)

        return Queue()

    def exit(self, pid):
        """The process ``pid`` exits: an armed kevent is delivered (once) and the fd is readable."""
        self.alive.discard(pid)
        if pid in self.armed:
            self.armed.discard(pid)
            self.queued.append(_Event(pid, self.KQ_FILTER_PROC, self.KQ_EV_ONESHOT,
                                      self.KQ_NOTE_EXIT))
            os.write(self.queues[-1].w, b"x")


@pytest.fixture
def kq():
    return StandIn()


@pytest.fixture
def watch(selector, kq):
    recycled: set[int] = set()
    w = kqwatch.KqueueExitWatch(selector, kq=kq,
                                is_running=lambda pid, ctime: pid in kq.alive and pid not in recycled)
    w.recycled = recycled
    yield w
    w.close()


def fired(watch, selector, timeout=0.05):
    out = ()
    for key, _ in selector.select(timeout):
        assert key.data == (TAG, None)
        out += watch.fired(key.data)
    return out


def test_it_answers_the_protocol_and_registers_one_kqueue(watch, selector):
    """One kqueue descriptor in the daemon's selector, ``data`` ``(TAG, None)``; an ExitWatch."""
    assert isinstance(watch, ExitWatch) and watch.supported
    assert [key.data for key in selector.get_map().values()] == [(TAG, None)]


def test_an_exit_ends_exactly_its_role_once(watch, selector, kq):
    """§8 watch: NOTE_EXIT for a watched pid fires its role, once; the others stay watched."""
    kq.alive |= {100, 200}
    assert watch.sync({"chat": (100, 1.0), "coder": (200, 2.0)}) == ()
    assert kq.armed == {100, 200}
    assert fired(watch, selector) == ()
    kq.exit(100)
    assert fired(watch, selector) == (("chat", (100, 1.0)),)
    assert watch.watched == {"coder": (200, 2.0)}
    assert watch.sync({"chat": (100, 1.0), "coder": (200, 2.0)}) == ()  # not re-armed
    assert kq.armed == {200} and fired(watch, selector) == ()


def test_esrch_on_register_is_already_gone_said_once(watch, kq):
    """Adding a kevent for a pid that no longer exists (ESRCH): gone, once, never re-tried."""
    assert watch.sync({"chat": (300, 3.0)}) == ("chat",)
    assert watch.sync({"chat": (300, 3.0)}) == ()
    assert watch.watched == {}


def test_a_recycled_pid_is_not_watched(watch, kq):
    """A live pid whose create time is not the recorded one has exited: its kevent is removed."""
    kq.alive.add(400)
    watch.recycled.add(400)
    assert watch.sync({"chat": (400, 4.0)}) == ("chat",)
    assert kq.armed == set() and watch.watched == {}


def test_sync_follows_the_store_and_close_unregisters(watch, selector, kq):
    """A role that leaves the targets is no longer watched (its kevent deleted), a new pid
    replaces the old one, an exit of a forgotten pid fires nothing; close unregisters."""
    kq.alive |= {500, 600}
    watch.sync({"chat": (500, 5.0)})
    watch.sync({"chat": (600, 6.0)})
    assert watch.watched == {"chat": (600, 6.0)} and kq.armed == {600}
    kq.exit(500)
    assert fired(watch, selector) == ()
    watch.close()
    assert len(selector.get_map()) == 0


def test_without_kqueue_it_says_so_and_watches_nothing(selector):
    """Where ``select.kqueue`` is missing (Linux) the watch says why; the resync timer notices."""
    w = kqwatch.KqueueExitWatch(selector, kq=object(), is_running=lambda pid, ctime: True)
    assert not w.supported and "kqueue" in w.unsupported_reason
    assert w.sync({"chat": (os.getpid(), 0.0)}) == ()
    assert len(selector.get_map()) == 0


# ---------------------------------------------------------------- macOS only (never run here)


@ON_MAC
def test_the_real_kernel_answers_esrch_for_a_dead_pid():
    """kqueue(2) on macOS: EVFILT_PROC for a reaped pid fails with ESRCH (ProcessLookupError)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    kq = select.kqueue()
    try:
        with pytest.raises(ProcessLookupError):
            kq.control([select.kevent(child.pid, filter=select.KQ_FILTER_PROC,
                                      flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,
                                      fflags=select.KQ_NOTE_EXIT)], 0, 0)
    finally:
        kq.close()


@ON_MAC
def test_the_real_kernel_reports_a_kill_of_a_process_we_did_not_start(selector):
    """A `sleep` started through a shell that exits (not our child) is seen to end at once."""
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    table = macos.Processes()
    target = (pid, table.create_time(pid))
    watch = kqwatch.KqueueExitWatch(
        selector, is_running=lambda p, c: table.recorded(p, c) is not None)
    try:
        assert watch.sync({"chat": target}) == ()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        assert fired(watch, selector, 3.0) == (("chat", target),)
        assert time.monotonic() - killed < 0.5
    finally:
        watch.close()
