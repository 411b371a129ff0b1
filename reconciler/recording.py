"""The record room of a pass: what the store remembers after acting (SHELL).

The rules are pure and live elsewhere: ``records.after_decision`` says what
a role's record becomes after its decision and outcome, ``events.for_decision``
whether that decision is news for the event log. This module reads what they
need from the store, writes what they return, and removes the working
directory of a role that is forgotten.

``spawned`` is the one write that cannot wait for the end of the pass: the
executor calls it (``act.py``'s hook) right after a spawn, so a reconciler
killed after that line still knows the pid (one killed before it re-adopts
by marker, ``readopt.py``).

``ended`` is the last write of an acting pass: a server this process
started that has already ended (a launch that fails at once, like a
llama-server refusing its KV cache type) is still our child, so its exit
status is known now and would be lost to the next run (§4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from reconciler import events, instances, postmortem, programs, records
from reconciler.decisions import Decision, Plan
from reconciler.desired import Desired
from reconciler.observed import Observed, RoleRecord

if TYPE_CHECKING:  # only a pass that acts makes outcomes
    from reconciler.outcomes import Outcome


def record_pass(
    store,
    desired: Desired,
    observed: Observed,
    plan: Plan,
    outcomes: tuple[Outcome, ...],
    *,
    git_commit: str | None,
    now: float,
    root: str,
    operator_starts: frozenset[str] = frozenset(),
) -> None:
    """Every role's record after its decision, and the events that are news."""
    by_role = {o.role: o for o in outcomes}
    # Read now, not at the pass's start: the spawn hook wrote the pids it got.
    records_now = {r.name: r for r in store.roles()}
    last = store.last_events()
    for decision in plan.decisions:
        outcome = by_role.get(decision.role)
        before = records_now.get(decision.role)
        after = records.after_decision(before, desired.role(decision.role), decision,
                                       observed.role(decision.role),
                                       _facts(decision, outcome), now)
        _write(store, before, after, root)
        event = events.for_decision(
            decision, outcome, before=before, after=after, last=last.get(decision.role),
            operator_started=decision.role in operator_starts, git_commit=git_commit, at=now)
        if event is not None:
            store.add_event(event)


def ended(store, root: str, now: float) -> None:
    """Record how our own children ended, for the servers that already did (see above)."""
    programs.reap()
    for record in store.roles():
        if not record.pid or record.exited_at is not None or record.exit is not None:
            continue
        if programs.exit_status(record.pid, record.create_time) is None:
            continue  # alive, or not a child of this process
        info = postmortem.gather(record.pid, record.create_time,
                                 instances.instance_dir(root, record.instance_id))
        store.put_role(attrs.evolve(record, exited_at=now, healthy_since=None, exit=info))


def spawned(store, desired: Desired, decision: Decision, pid: int | None,
            create_time: float | None) -> None:
    """Record a just-spawned server's pid and create time at once."""
    spec = desired.role(decision.role)
    record = store.role(decision.role)
    if record is None and spec is not None:
        record = records.new_record(spec, decision)
    if record is not None:
        store.put_role(attrs.evolve(
            record, pid=pid, create_time=create_time,
            instance_id=decision.instance_id or record.instance_id))


def _facts(decision: Decision, outcome: Outcome | None) -> records.ActionFacts | None:
    """What the executor did, as the record rules read it (None: the decision did not act)."""
    if outcome is None or not decision.acts:
        return None
    return records.ActionFacts(ok=outcome.ok and not outcome.skipped, skipped=outcome.skipped,
                               exited=outcome.exited, pid=outcome.pid,
                               create_time=outcome.create_time)


def _write(store, before: RoleRecord | None, after: RoleRecord | None, root: str) -> None:
    if after is None:
        if before is not None:
            store.delete_role(before.name)
            instances.remove_dir(root, before.instance_id)
    elif after != before:
        store.put_role(after)
