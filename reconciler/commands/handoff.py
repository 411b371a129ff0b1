"""``reconcile start`` while another reconciler holds the lock: hand the start over (SHELL).

``reconcile watch`` holds the state directory's lock for its whole life, so
``start`` cannot run a pass of its own while it runs. Instead it:

1. queues the start in the store (``Store.request_start``: one short write,
   which SQLite's WAL and busy timeout allow beside the daemon's; one per
   instance of a role with replicas, §12);
2. reads the holder's pid from the lock file and, only if that pid is alive
   and runs ``reconcile … watch``, sends it SIGHUP ("reconcile now");
3. waits (``--lock-timeout`` or ``WAIT`` seconds, whichever is longer) for
   the daemon's ``operator-start`` event for the role and the decision its
   pass logged after it, and prints both.

Exit codes: 0 the daemon took the start and its pass did what it planned
(or, with no decision logged in time, the role's server of ours is running);
1 not taken in time (the request stays queued: the holder's next pass takes
it), taken but not confirmed (no decision logged in time and nothing of ours
running), or the action failed; 3 the pass still needs an operator (gave up
again, refused).
"""

from __future__ import annotations

import sys
import time

from reconciler.commands import common
from reconciler.commands.common import StartOptions
from reconciler.commands.options import GlobalOptions
from reconciler.core.events import NEEDS_OPERATOR, EventKind
from reconciler.core.exitcodes import Exit
from reconciler.system import signals
from reconciler.world import procs

#: The shortest time ``start`` waits for the daemon's answer.
WAIT = 30.0
POLL = 0.1
#: The lock file is truncated, then written, right after the flock is taken.
HOLDER_GRACE = 1.0


def hand_over(g: GlobalOptions, o: StartOptions, lock, names: tuple[str, ...]) -> int:
    """Queue the starts of ``names`` (``o.name``'s instances, §12) for the lock holder, wake
    it, wait and report (the answer for ``o.name``: the holder takes every queued start in
    one pass)."""
    name = o.name
    wait = max(WAIT, float(g.lock_timeout or 0.0))
    with common.open_store(g) as store:
        before = store.last_event_id()
        for each in names:
            store.request_start(each)
        holder = _holder(lock)
        if not _wake(holder):
            who = f"pid {holder}" if holder else "another process"
            print(f"reconcile: another reconciler holds {lock.path} ({who}) and it is not a "
                  f"running `reconcile watch`; the start of {name} is queued and the next "
                  f"pass (reconcile --once, start or watch) will take it", file=sys.stderr)
            return Exit.ERROR
        taken, answer = _wait(store, name, before, holder, wait)
    return _report(g, o, holder, wait, taken, answer)


def _holder(lock) -> int | None:
    deadline = time.monotonic() + HOLDER_GRACE
    while True:
        pid = lock.holder()
        if pid is not None or time.monotonic() >= deadline:
            return pid
        time.sleep(0.05)


def _wake(pid: int | None) -> bool:
    """SIGHUP to a live ``reconcile watch``; False for anything else."""
    if pid is None or not procs.looks_like_watch(pid):
        return False
    return signals.hangup(pid)


def _wait(store, name: str, before: int, holder: int, wait: float):
    """The daemon's ``operator-start`` event after ``before`` and the events after it."""
    deadline = time.monotonic() + wait
    while True:
        seen = store.events(name, after_id=before)
        taken = next((e for e in seen if e.kind is EventKind.OPERATOR_START), None)
        answer = [e for e in seen if taken is not None and e.id > taken.id
                  and e.kind is not EventKind.OPERATOR_START]
        if answer or time.monotonic() >= deadline or not procs.looks_like_watch(holder):
            return taken, answer
        time.sleep(POLL)


def _report(g: GlobalOptions, o: StartOptions, holder: int, wait: float, taken, answer) -> int:
    name = o.name
    if o.json:
        common.print_json({
            "handed_to": holder, "taken": taken is not None,
            "events": [_event_json(e) for e in ([taken] if taken else []) + answer],
        })
    if taken is None:
        print(f"reconcile: `reconcile watch` (pid {holder}) holds the lock and did not take "
              f"the start of {name} within {wait:g}s; the request stays queued for its next "
              f"pass (see `reconcile events {name}`)", file=sys.stderr)
        return Exit.ERROR
    if not o.json:
        print(f"handed to `reconcile watch` (pid {holder}), which holds the lock:")
        for event in [taken, *answer]:
            print(_event_line(event))
    if not answer:
        # Taken but not confirmed: the pass may still be running, or decided
        # nothing worth an event. Only a server of ours running now says the
        # start is moot (0); anything else is "not confirmed" (1).
        running = _running_pid(g, name)
        if running is not None:
            print(f"reconcile: the daemon took the start of {name}; it is running "
                  f"(pid {running}): nothing to start", file=sys.stderr)
            return Exit.OK
        print(f"reconcile: the daemon took the start of {name}, but its pass logged no "
              f"decision for it within {wait:g}s: not confirmed (see `reconcile events "
              f"{name}` and `reconcile status {name}`)", file=sys.stderr)
        return Exit.ERROR
    if any(e.ok is False for e in answer):
        return Exit.ERROR
    if any(e.kind in NEEDS_OPERATOR for e in answer):
        return Exit.OPERATOR
    return Exit.OK


def _running_pid(g: GlobalOptions, name: str) -> int | None:
    """The pid of the role's recorded server when it is ours and alive now, else None."""
    with common.open_store(g) as store:
        record = store.role(name)
    if record is None or record.terminal is not None or not record.pid:
        return None
    if not procs.is_owned(record.pid, record.create_time, record.instance_id):
        return None
    return record.pid


def _event_line(event) -> str:
    mark = {True: " done", False: " FAILED", None: ""}[event.ok]
    detail = f": {event.detail}" if event.detail else ""
    return f"  {event.role}: {event.kind}{mark} ({event.reason}{detail})"


def _event_json(event) -> dict:
    return {"id": event.id, "at": event.at, "role": event.role, "verb": event.kind,
            "reason": event.reason, "detail": event.detail, "ok": event.ok}

