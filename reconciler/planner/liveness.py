"""Liveness checks: is a live server hung? (PURE; BEHAVIOUR §4.1, opt-in per role).

A role with ``spec.liveness`` is checked once a ``period``. The record keeps
the counters between passes (``observed.Liveness``); ``look`` gives the
counters after this pass's observation, and the planner decides from them
(``livenessrungs``): ``failures`` consecutive failed checks make a managed
server ``unresponsive`` (restarted under the restart policy) and an adopted
one reported, never touched. ``records`` stores the same ``look``.

Two detectors fail a check:

* **no answer**: the role's request (``/health``) timed out: the server
  accepts the connection and never answers (SIGSTOP, a wedged HTTP thread).
  A refused connection is no failed check: that is a server gone or not
  listening yet, the process table's business, not liveness's;
* **no progress** (a runtime that declares progress counters, e.g.
  llama.cpp with ``--metrics``): requests in flight while the decode
  counter has not moved for a whole period, or the counters' request
  itself timed out (llama-server answers ``/metrics`` from its main loop:
  a wedged loop cannot).

Any answered check that shows no failure starts the count over: a busy
server whose counter moves is never unresponsive, however long it works.
Checks are a period apart: a pass sooner than that (a file event) does not
count twice. Before ``grace`` after the server's start nothing counts.
"""

from __future__ import annotations

from reconciler.core.desired import LivenessSpec
from reconciler.core.observed import Health, Liveness, ProbeFacts
from reconciler.core.units import format_duration

#: A check counts when at least this share of a period has passed since the
#: last counted one (the daemon wakes *at* the period; its wake-up may be early
#: by a scheduling hair).
_SLACK = 0.9


def look(spec: LivenessSpec, counters: Liveness, probe: ProbeFacts | None,
         started_at: float | None, now: float) -> Liveness:
    """The counters after this pass's observation of a live server."""
    if probe is None or probe.health is Health.NOT_PROBED:
        return counters
    moved = _progress(counters, probe, now)
    if started_at is not None and now - started_at < spec.grace:
        return Liveness(decoded=moved.decoded, decoded_at=moved.decoded_at)  # nothing counts yet
    failed = failure(spec, moved, probe, now)
    if failed is None:
        if probe.health is Health.UNREACHABLE:
            return moved  # refused, or broken: not liveness's to judge; nothing starts over
        return Liveness(decoded=moved.decoded, decoded_at=moved.decoded_at)
    due = counters.checked_at is None or now - counters.checked_at >= spec.period * _SLACK
    if not due:
        return Liveness(failures=moved.failures, since=moved.since, checked_at=moved.checked_at,
                        detail=failed, decoded=moved.decoded, decoded_at=moved.decoded_at)
    return Liveness(failures=moved.failures + 1,
                    since=moved.since if moved.since is not None else now,
                    checked_at=now, detail=failed,
                    decoded=moved.decoded, decoded_at=moved.decoded_at)


def failure(spec: LivenessSpec, counters: Liveness, probe: ProbeFacts, now: float) -> str | None:
    """What fails this check, in words; None: it passes (or says nothing)."""
    if probe.timed_out:
        return probe.detail or f"no answer within {format_duration(spec.timeout)}"
    if probe.progress_timeout:
        return probe.progress_timeout
    progress = probe.progress
    if progress is None or progress.in_flight <= 0 or counters.decoded_at is None:
        return None
    flat = now - counters.decoded_at
    if flat >= spec.period * _SLACK:
        n = int(progress.in_flight)
        return (f"no progress: {n} request{'' if n == 1 else 's'} in flight, decode counter "
                f"flat at {progress.decoded:g} for {format_duration(flat)}")
    return None


def _progress(counters: Liveness, probe: ProbeFacts, now: float) -> Liveness:
    """The counters with the decode counter's last movement brought up to date.

    An idle server (nothing in flight) is making all the progress it is asked
    for: its counter is taken as moving.
    """
    progress = probe.progress
    if progress is None:
        return counters
    if (counters.decoded is None or progress.decoded != counters.decoded
            or progress.in_flight <= 0 or counters.decoded_at is None):
        return Liveness(failures=counters.failures, since=counters.since,
                        checked_at=counters.checked_at, detail=counters.detail,
                        decoded=progress.decoded, decoded_at=now)
    return counters


def unresponsive(spec: LivenessSpec, counters: Liveness) -> bool:
    """Has the server failed ``failures`` consecutive checks?"""
    return counters.failures >= spec.failures


def counted(spec: LivenessSpec, counters: Liveness) -> str:
    """``<what failed> (2 of 3 liveness checks failed)``."""
    return f"{counters.detail} ({counters.failures} of {spec.failures} liveness checks failed)"


def summary(spec: LivenessSpec, counters: Liveness) -> str:
    """``unresponsive: <what failed> (3 of 3 …)``, or ``liveness: …`` for the count so far."""
    head = "unresponsive" if unresponsive(spec, counters) else "liveness"
    return f"{head}: {counted(spec, counters)}"


def next_check(spec: LivenessSpec, counters: Liveness, started_at: float | None,
               now: float) -> float:
    """Seconds until the next check is due (the watch daemon's requeue hint)."""
    if started_at is not None and now - started_at < spec.grace:
        return max(0.0, started_at + spec.grace - now)
    if counters.checked_at is None:
        return spec.period
    return max(0.0, counters.checked_at + spec.period - now)
