"""The executor: does what a Plan says, and guards again (SHELL; BEHAVIOUR §2, §4, §6).

``apply(plan)`` walks the decisions in plan order (unload → stop → restart →
start, as the planner orders them) and turns each acting one into an
``Outcome`` value. It trusts the plan for *what* to do but re-checks the
safety rules itself, so a buggy plan cannot make it

* signal a process it does not own (pid + create time + marker, re-checked
  before every single signal),
* act on a port outside the allowlist, or on a decision without an
  instance id, or send a packet to a non-loopback host,
* start over a port something else accepts connections on, or
* start something whose memory was counted as freed by a stop that failed.

``stop()`` is SIGTERM to the process group, up to ``grace`` for the leader
to exit, SIGKILL to the group, and once the leader is gone a SIGKILL to the
group again for grandchildren that carry our marker. A grandchild that left
the group with ``setsid`` is out of reach of the group signals; it still
carries the marker, so ``procs.find_marked`` will report it.

Ollama is never launched: a load is ``POST /api/generate`` with an empty
prompt and the wanted ``keep_alive``, an unload the same with
``keep_alive: 0``. No other Ollama path is ever called.
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Callable, Protocol

import attrs

from reconciler import procs, spawn
from reconciler.identity import MARKER_ENV
from reconciler.model import Decision, NodeConfig, Plan, Verb

_POLL = 0.02  # seconds between "is it gone yet?" looks
_KILL_WAIT = 5.0  # how long a SIGKILLed leader may take to disappear
_SWEEP_WAIT = 1.0  # how long grandchildren may take after the group SIGKILL


@attrs.frozen(kw_only=True)
class StopResult:
    ok: bool
    gone: bool  # the recorded process is really gone: its memory may be released
    killed: bool = False  # SIGTERM was not enough
    error: str = ""
    detail: str = ""


@attrs.frozen(kw_only=True)
class ActionResult:
    ok: bool
    status: int | None = None  # HTTP status, when one came back
    error: str = ""
    detail: str = ""


@attrs.frozen(kw_only=True)
class Outcome:
    role: str
    verb: Verb
    ok: bool
    skipped: bool = False
    detail: str = ""
    pid: int | None = None  # the new process (start/restart)
    create_time: float | None = None
    exited: bool = False  # the stopped process is really gone → memory may be released
    at: float = 0.0  # wall time the action finished


class Hooks(Protocol):
    def before_start(self, decision: Decision) -> str | None:
        """Called before every spawn (START, RESTART) and Ollama LOAD; a string refuses it."""

    def after_spawn(self, decision: Decision, result: spawn.SpawnResult) -> None:
        """Called right after a spawn attempt, successful or not."""

    def after_action(self, outcome: Outcome) -> None:
        """Called once per acting decision with its outcome (also skipped/refused ones)."""


class NoHooks:
    def before_start(self, decision: Decision) -> str | None:
        return None

    def after_spawn(self, decision: Decision, result: spawn.SpawnResult) -> None:
        pass

    def after_action(self, outcome: Outcome) -> None:
        pass


# ---------------------------------------------------------------- stop


def stop(pid: int, create_time: float, instance_id: str, *, grace: float) -> StopResult:
    """Stop an owned server and its process group; never signals anything else."""
    spawn.reap()
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

    error = _signal_owned(pid, create_time, instance_id, signal.SIGTERM)
    if error:
        return StopResult(ok=False, gone=not procs.is_running(pid, create_time), error=error)
    killed = False
    if not _wait_gone(pid, create_time, grace):
        error = _signal_owned(pid, create_time, instance_id, signal.SIGKILL)
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
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:  # the leader left its own group: signal only the leader
            os.kill(pid, sig)
    except ProcessLookupError:
        return ""
    except PermissionError as exc:
        return f"cannot signal pid {pid}: {exc.strerror}"
    return ""


def _wait_gone(pid: int, create_time: float, timeout: float) -> bool:
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        spawn.reap()
        if not procs.is_running(pid, create_time):
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
    try:
        if not foreign:
            os.killpg(pgid, signal.SIGKILL)
        else:
            for member in marked:
                os.kill(member, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
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
        if procs.marker_of(member) == instance_id:
            marked.append(member)
        else:
            created = procs.create_time(member)
            if created is not None and procs.is_running(member, created):
                foreign.append(member)
    return marked, foreign
