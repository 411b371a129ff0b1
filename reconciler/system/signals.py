"""Sending and catching signals (SHELL; the one module that imports ``signal``).

Sending. This module trusts its caller: whether a process is ours (pid +
create time + marker, BEHAVIOUR §3) is decided before, by the executor,
right before each call. A failure is a value (a message, or False), never an
exception: the process may have exited between the look and the signal.

* ``to_group(leader, sig)``: the group a server leads (a managed server has
  its own session), or the leader alone when it left its group;
* ``kill(pid)`` / ``kill_group(pgid)``: SIGKILL, for what outlived a grace
  period or a timeout;
* ``hangup(pid)``: "reconcile now", for a running ``reconcile watch``.

Catching, for the daemon (``watch.py``). ``held(signums)`` blocks signals
from before the lock is taken until the daemon's handlers are in, so one
that comes early stays pending instead of taking its default action.
``Wakeups`` installs handlers that do nothing but let ``signal.set_wakeup_fd``
write the signal's number to a pipe: the daemon's ``selectors`` wait reads
it and acts between passes, never inside one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterable, Iterator

SIGTERM = signal.SIGTERM
SIGINT = signal.SIGINT
SIGHUP = signal.SIGHUP
SIGKILL = signal.SIGKILL

#: The signals ``reconcile watch`` acts on: stop (TERM, INT) and reconcile now (HUP).
DAEMON = (SIGTERM, SIGINT, SIGHUP)


def name(signum: int) -> str:
    """``SIGTERM`` for 15."""
    return signal.Signals(signum).name


# ---------------------------------------------------------------- sending


def to_group(leader: int, sig: int) -> str:
    """Signal the group ``leader`` leads (or ``leader`` alone outside its group).

    "" when sent, or when the process is already gone; otherwise why not.
    """
    try:
        if os.getpgid(leader) == leader:
            os.killpg(leader, sig)
        else:  # the leader left its own group: signal only the leader
            os.kill(leader, sig)
    except ProcessLookupError:
        return ""
    except PermissionError as exc:
        return f"cannot signal pid {leader}: {exc.strerror}"
    return ""


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (gone or not ours to signal: nothing happens)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, SIGKILL)


def kill(pid: int) -> None:
    """SIGKILL one process (gone or not ours to signal: nothing happens)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, SIGKILL)


def hangup(pid: int) -> bool:
    """SIGHUP to ``pid``; False when it is gone or not ours to signal."""
    try:
        os.kill(pid, SIGHUP)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# ---------------------------------------------------------------- catching


@contextlib.contextmanager
def held(signums: Iterable[int]) -> Iterator[None]:
    """Block ``signums`` for the block's duration; the old mask after.

    Ones that arrived while held and were not let in meanwhile (a
    ``Wakeups`` unblocks them) are discarded, not delivered to a restored
    default action (a late SIGHUP must not turn a clean exit into death).
    Nothing may spawn a process while they are held: a child would
    inherit the mask.
    """
    wanted = set(signums)
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    try:
        yield
    finally:
        ours = wanted - saved
        while ours and signal.sigtimedwait(ours, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


class Wakeups:
    """Signals delivered as bytes on ``fd`` (their numbers), between passes.

    ``install()`` only works in the main thread (Python's rule for signal
    handlers); elsewhere it does nothing and the caller relies on its other
    wake-ups (tests drive a daemon from a thread).
    """

    def __init__(self, fd: int, signums: Iterable[int]) -> None:
        self._fd = fd
        self._signums = tuple(signums)
        self._saved_handlers: dict[int, object] = {}
        self._saved_fd: int | None = None
        self._saved_mask: set[int] | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._saved_fd = signal.set_wakeup_fd(self._fd, warn_on_full_buffer=False)
        for signum in self._signums:
            self._saved_handlers[signum] = signal.signal(signum, _ignore)
        # Only now may they arrive (``held``): one pending since is acted on.
        self._saved_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, self._signums)

    def restore(self) -> None:
        if self._saved_mask is not None:
            # Held again first, so none meets a restored default action mid-teardown.
            signal.pthread_sigmask(signal.SIG_SETMASK, self._saved_mask)
            self._saved_mask = None
        for signum, handler in self._saved_handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._saved_handlers.clear()
        if self._saved_fd is not None:
            signal.set_wakeup_fd(self._saved_fd)
            self._saved_fd = None


def _ignore(signum: int, frame: object) -> None:
    """The wake-up fd carries the signal; the handler itself has nothing to do."""
