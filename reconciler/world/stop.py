"""Stopping one server of ours: SIGTERM, grace, SIGKILL, on its process group (SHELL; §3, §4, §5).

``stop(pid, create_time, instance_id, grace=)`` is the one stop algorithm:
SIGTERM to the process group, up to ``grace`` for the leader to exit, SIGKILL
to the group, and once the leader is gone a SIGKILL to the group again for
grandchildren that carry our marker (members without it are left alone).
Ownership (``procs.is_owned``: pid + create time + marker) is asked again
before every single signal, so a recycled pid or a process that lost our
marker is never signalled. A grandchild that left the group with ``setsid``
is out of reach of the group signals; it still carries the marker and leads
its own group, so the orphan survey (``procs.find_ours``) finds it when it
proves itself ours (uid, working directory).

Used by the executor (stops and restarts) and by the after-start exposure
check (§5: an exposed server gets ``EXPOSED_GRACE``, not the usual grace).
"""

from __future__ import annotations

import time

import attrs

from reconciler.core import ownership
from reconciler.core.ownership import MARKER_ENV
from reconciler.system import programs, signals
from reconciler.world import procs

_POLL = 0.02  # seconds between "is it gone yet?" looks
_KILL_WAIT = 5.0  # how long a SIGKILLed leader may take to disappear
_SWEEP_WAIT = 1.0  # how long grandchildren may take after the group SIGKILL
EXPOSED_GRACE = 3.0  # BEHAVIOUR §5: an exposed server is stopped with a 3 s grace


@attrs.frozen(kw_only=True)
class StopResult:
    ok: bool
    gone: bool  # the recorded process is really gone: its memory may be released
    killed: bool = False  # SIGTERM was not enough
    error: str = ""
    detail: str = ""



def stop(pid: int, create_time: float, instance_id: str, *, grace: float) -> StopResult:
    """Stop an owned server and its process group; never signals anything else."""
    programs.reap()
    if not procs.is_running(pid, create_time):
        now = procs.create_time(pid)
        if now is not None and procs.is_running(pid, now):
            return StopResult(ok=False, gone=True, error=(
                f"not owned: pid {pid} is another process now (created {now:.2f}, "
                f"recorded {create_time:.2f}); the recorded one is gone"))
        return StopResult(ok=True, gone=True, detail="already gone")
    if not procs.is_owned(pid, create_time, instance_id):
        return StopResult(ok=False, gone=False, error=(
            f"not owned: pid {pid} does not carry {MARKER_ENV}={instance_id}"))

    error = _signal_owned(pid, create_time, instance_id, signals.SIGTERM)
    if error:
        return StopResult(ok=False, gone=not procs.is_running(pid, create_time), error=error)
    killed = False
    if not _wait_gone(pid, create_time, grace):
        error = _signal_owned(pid, create_time, instance_id, signals.SIGKILL)
        killed = not error
        if error or not _wait_gone(pid, create_time, _KILL_WAIT):
            return StopResult(ok=False, gone=False, killed=killed,
                              error=error or f"pid {pid} still alive after SIGKILL")
    return StopResult(ok=True, gone=True, killed=killed,
                      detail=_sweep_group(pid, instance_id))


def _signal_owned(pid: int, create_time: float, instance_id: str, sig: int) -> str:
    """Signal the group an owned leader leads; "" when sent (or it just died)."""
    if not procs.is_owned(pid, create_time, instance_id):
        if not procs.is_running(pid, create_time):
            return ""  # it exited between the looks: nothing to signal
        return f"not owned: pid {pid} lost {MARKER_ENV}={instance_id}; no signal sent"
    return signals.to_group(pid, sig)


def _wait_gone(pid: int, create_time: float, timeout: float) -> bool:
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        programs.reap()
        # A zombie leader is not gone while its other threads still exit: they
        # hold its memory and its listening socket (a restart would find its
        # own port taken).
        if not procs.is_running(pid, create_time) and not procs.exiting(pid, create_time):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(_POLL, remaining))


def _sweep_group(pgid: int, instance_id: str) -> str:
    """SIGKILL what is left of the dead leader's group, if all of it is ours."""
    marked, foreign = _group_members(pgid, instance_id)
    if not marked and not foreign:
        return ""
    if not foreign:
        signals.kill_group(pgid)
    else:
        for member in marked:
            signals.kill(member)
    deadline = time.monotonic() + _SWEEP_WAIT
    while marked and time.monotonic() < deadline:
        time.sleep(_POLL)
        marked, _ = _group_members(pgid, instance_id)
    parts = []
    if marked:
        parts.append(f"group members still alive: {', '.join(map(str, marked))}")
    if foreign:
        parts.append(f"left alone (no marker): {', '.join(map(str, foreign))}")
    return "; ".join(parts)


def _group_members(pgid: int, instance_id: str) -> tuple[list[int], list[int]]:
    """Live members of a group: (carrying our marker, not carrying it)."""
    marked, foreign = [], []
    for member in procs.group_pids(pgid):
        if ownership.carries(procs.marker_of(member), instance_id):
            marked.append(member)
        else:
            created = procs.create_time(member)
            if created is not None and procs.is_running(member, created):
                foreign.append(member)
    return marked, foreign
