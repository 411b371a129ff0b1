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
"""

from __future__ import annotations

import subprocess
import time
from typing import Callable, Mapping, Sequence

import attrs

from reconciler.system import signals
from reconciler.core.desired import RunAs

_children: dict[int, subprocess.Popen] = {}
_started: dict[int, float] = {}  # when each child was started (wall clock)
#: Exit statuses of reaped children (``Popen.returncode``: negative is a signal).
_statuses: dict[int, tuple[int, float]] = {}  # pid → (returncode, when it was started)
_STATUSES_KEPT = 256
#: How far a recorded create time may be from our start of a child and still be it.
_SAME_START = 2.0


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
    try:
        proc = subprocess.Popen(
            list(argv), executable=argv[0], env=dict(env), cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            close_fds=True, start_new_session=True, umask=umask, preexec_fn=in_child,
            **_privileges(run_as),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return Started(failure=_message(exc))
    _children[proc.pid] = proc
    _started[proc.pid] = time.time()
    _statuses.pop(proc.pid, None)  # a status kept for an earlier holder of this pid
    return Started(pid=proc.pid)


def reap() -> tuple[tuple[int, int], ...]:
    """Collect exited children without blocking: ``(pid, returncode)`` of each."""
    done = []
    for pid, proc in list(_children.items()):
        code = proc.poll()
        if code is not None:
            del _children[pid]
            done.append((pid, code))
            _statuses[pid] = (code, _started.pop(pid, 0.0))
    while len(_statuses) > _STATUSES_KEPT:
        del _statuses[next(iter(_statuses))]  # the oldest: dicts keep insertion order
    return tuple(done)


def exit_status(pid: int, create_time: float | None = None) -> int | None:
    """A child's exit status (``Popen.returncode``), once it has ended; None otherwise.

    None also for a pid that is not our child: only the parent learns it.
    ``create_time`` (the recorded one) must match our start of that child, so
    an earlier process that held the same pid is never given its status.
    """
    if pid in _children:
        reap()
    found = _statuses.get(pid)
    if found is None:
        return None
    code, started = found
    if create_time is not None and abs(create_time - started) > _SAME_START:
        return None
    return code


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
