"""Running external programs (SHELL; the one module that imports ``subprocess``).

Every program the reconciler runs is made the same careful way: exactly the
environment the caller gives (nothing of ours merged in), stdin from
``/dev/null``, no other inherited descriptor, a session of its own (so its
whole process group can be signalled), and with ``run_as`` the supplementary
groups dropped, then the gid, then the uid (``subprocess`` does them in that
order in the child, before exec). Failures are values, never exceptions.

* ``run(argv, …)``: a short program run to completion — ``git`` for the
  manifests' commit, a runtime's version probe — within a timeout; one that
  outlives it is killed with its group. The result is a ``Ran``.
* ``start(argv, …)``: a long-lived managed server (``spawn.py`` decides how),
  not waited for. Its ``Popen`` is kept so that the garbage collector never
  finalises a running one (that warns and proves nothing); ``reap()``
  collects the exited ones without blocking, and keeps each one's exit
  status for ``exit_status(pid)``: Linux tells it to the parent alone, and
  it is what ``status`` shows of why a server ended (BEHAVIOUR §4). No
  SIGCHLD handler is installed; when the reconciler exits its children are
  re-parented to init, which reaps them (their status is then lost to us).

A status is given only for the process a record names: the pid *and* its
create time. The create time a record holds is the one the caller read
right after the start (``note_create_time``), so the two are compared as
equals, not against our wall clock: a create time is the boot time plus
ticks, and the boot time moves when the wall clock is stepped (a VM resumed,
NTP), so a wall-clock window once refused our own child's status now and then
(``exit status unknown`` for a server we had just started). The children
table is shared by the pass and the observer's thread: one lock, so a child
is reaped, and its status kept, exactly once.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable, Mapping, Sequence

import attrs

from reconciler.system import signals
from reconciler.core.desired import RunAs
from reconciler.core.ownership import same_start

_lock = threading.RLock()  # the tables below: the pass and the observer's thread share them
_children: dict[int, subprocess.Popen] = {}
#: Each child's start: (wall clock before, wall clock after, its create time once noted).
_started: dict[int, tuple[float, float, float | None]] = {}
#: Exit statuses of reaped children (``Popen.returncode``: negative is a signal).
_statuses: dict[int, tuple[int, tuple[float, float, float | None]]] = {}
_STATUSES_KEPT = 256
#: Where no create time was noted, how far one may lie outside our start's wall-clock
#: window and still be that start: a create time is the boot time (whole seconds,
#: truncated) plus clock ticks, so up to a second early, and the pass may be slow.
_WINDOW_SLACK = 2.0


@attrs.frozen(kw_only=True)
class Ran:
    """What a short program did: its exit code and output, or why it has none."""

    returncode: int | None = None  # None: it did not run, or did not exit in time
    stdout: bytes = b""
    stderr: bytes = b""
    failure: str = ""  # "cannot run git: No such file or directory", "… did not exit within 5s"

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@attrs.frozen(kw_only=True)
class Started:
    """A long-lived program's pid, or why it could not be started."""

    pid: int | None = None
    failure: str = ""


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | None = None,
    run_as: RunAs | None = None,
) -> Ran:
    """Run ``argv`` to completion (at most ``timeout`` seconds) and capture its output."""
    try:
        proc = subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            close_fds=True, **_privileges(run_as),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Ran(failure=f"cannot run {argv[0]}: {_message(exc)}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        signals.kill_group(proc.pid)
        proc.communicate()
        return Ran(failure=f"{argv[0]} did not exit within {timeout:g}s")
    return Ran(returncode=proc.returncode, stdout=out, stderr=err)


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    output: int,
    run_as: RunAs | None = None,
    umask: int = -1,
    in_child: Callable[[], object] | None = None,
) -> Started:
    """Start ``argv`` in its own session, stdout and stderr to the descriptor ``output``.

    ``in_child`` runs in the child after the privilege drop, right before
    exec (keep it to one C call: nothing else is safe there).
    """
    before = time.time()
    try:
        proc = subprocess.Popen(
            list(argv), executable=argv[0], env=dict(env), cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            close_fds=True, start_new_session=True, umask=umask, preexec_fn=in_child,
            **_privileges(run_as),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Started(failure=_message(exc))
    with _lock:
        _children[proc.pid] = proc
        _started[proc.pid] = (before, time.time(), None)
        _statuses.pop(proc.pid, None)  # a status kept for an earlier holder of this pid
    return Started(pid=proc.pid)


def note_create_time(pid: int, create_time: float | None) -> None:
    """The create time the caller read of its new child ``pid`` (the one it records)."""
    with _lock:
        start = _started.get(pid)
        if start is not None and create_time is not None:
            _started[pid] = (start[0], start[1], create_time)
        elif pid in _statuses and create_time is not None:  # it ended before the note
            code, (before, after, _) = _statuses[pid]
            _statuses[pid] = (code, (before, after, create_time))


def reap() -> tuple[tuple[int, int], ...]:
    """Collect exited children without blocking: ``(pid, returncode)`` of each."""
    done = []
    with _lock:
        for pid, proc in list(_children.items()):
            code = proc.poll()
            if code is not None:
                del _children[pid]
                done.append((pid, code))
                _statuses[pid] = (code, _started.pop(pid, (0.0, 0.0, None)))
        while len(_statuses) > _STATUSES_KEPT:
            del _statuses[next(iter(_statuses))]  # the oldest: dicts keep insertion order
    return tuple(done)


def exit_status(pid: int, create_time: float | None = None) -> int | None:
    """A child's exit status (``Popen.returncode``), once it has ended; None otherwise.

    None also for a pid that is not our child: only the parent learns it.
    ``create_time`` (the recorded one) must be our start of that child, so an
    earlier process that held the same pid is never given its status.
    """
    with _lock:
        if pid in _children:
            reap()
        found = _statuses.get(pid)
    if found is None:
        return None
    code, start = found
    if create_time is not None and not _is_that_start(create_time, start):
        return None
    return code


def _is_that_start(create_time: float, start: tuple[float, float, float | None]) -> bool:
    """Is ``create_time`` our start of the child? The noted create time when there is one;
    else our start's wall-clock window, widened by ``_WINDOW_SLACK``."""
    before, after, noted = start
    if noted is not None:
        return same_start(noted, create_time)
    return before - _WINDOW_SLACK <= create_time <= after + _WINDOW_SLACK


def is_child(pid: int) -> bool:
    """Was ``pid`` started by this process and not reaped yet?"""
    return pid in _children


def _privileges(run_as: RunAs | None) -> dict:
    if run_as is None:
        return {}
    return {"user": run_as.uid, "group": run_as.gid, "extra_groups": []}


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
