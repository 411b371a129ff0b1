"""The record room of a pass: what the store remembers after acting (SHELL).

The rules are pure and live elsewhere: ``records.after_decision`` says what
a role's record becomes after its decision and outcome, ``events.for_decision``
whether that decision is news for the event log. This module reads what they
need from the store, writes what they return, and removes the working
directory of a role that is forgotten.

Two writes cannot wait for the end of the pass; the executor makes them
through ``act.py``'s hooks, each one statement (so one transaction):

* ``intend``, right before an action's first signal or spawn: the record
  gets the action's ``Intent`` (what will be stopped, what will run). A
  reconciler killed after it leaves a record that says its server's exit
  was its own doing (``intents.finish_interrupted``), not a crash;
* ``spawned``, right after a spawn: the new server's whole record, exactly
  as the end of the pass would write it for a successful start. Its pid,
  create time, instance id, launch digest and generation change together or
  not at all: a record never pairs one launch's pid with another launch's
  identity. A reconciler killed between the spawn and this write leaves an
  unrecorded server: re-adopted or stopped as an orphan (``readopt.py``).

``stopped``, right after a stop that ended its server, writes that role's
record the same way, so a start later in the pass (an eviction's reason)
never sits in the store beside the memory the stop freed.

``ended`` is the last write of an acting pass: a server this process
started that has already ended (a launch that fails at once, like a
llama-server refusing its KV cache type) is still our child, so its exit
status is known now and would be lost to the next run (§4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from reconciler.core import events
from reconciler.system import failpoints
from reconciler.world import instances
from reconciler.planner import intents, records
from reconciler.core.decisions import Decision, Plan, Reason
from reconciler.core.desired import Desired
from reconciler.core.observed import Observed, RoleObservation, RoleRecord

if TYPE_CHECKING:  # only a pass that acts makes outcomes
    from reconciler.core.outcomes import Outcome


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
        failpoints.reach("recording")
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
    from reconciler.system import programs  # (a pass that acted: reaping, post-mortems)
    from reconciler.world import postmortem

    programs.reap()
    for record in store.roles():
        if not record.pid or record.exited_at is not None or record.exit is not None:
            continue
        if programs.exit_status(record.pid, record.create_time) is None:
            continue  # alive, or not a child of this process
        info = postmortem.gather(record.pid, record.create_time,
                                 instances.instance_dir(root, record.instance_id))
        store.put_role(attrs.evolve(record, exited_at=now, healthy_since=None, exit=info))


def intend(store, desired: Desired, decision: Decision, now: float) -> None:
    """Write what an action is about to do into its role's record (one statement)."""
    record = store.role(decision.role)
    if record is None:
        spec = desired.role(decision.role)
        if spec is None:
            return
        record = records.new_record(spec, decision)
    store.put_role(intents.with_intent(record, decision, now, desired.node.stop_grace))


def stopped(store, desired: Desired, decision: Decision, now: float) -> None:
    """Record a stop that ended its server at once: its memory is free (one write).

    A removed role's record is only emptied here (no pid, nothing reserved);
    the end of the pass drops it and removes its directory.
    """
    before = store.role(decision.role)
    if before is None:
        return
    if decision.reason is Reason.REMOVED:
        store.put_role(attrs.evolve(before, process=None, reserved=0))
        return
    facts = records.ActionFacts(ok=True, exited=True)
    after = records.after_decision(before, desired.role(decision.role), decision,
                                   RoleObservation(name=decision.role), facts, now)
    if after is not None:
        store.put_role(after)


def spawned(store, desired: Desired, decision: Decision, pid: int | None,
            create_time: float | None, *, now: float) -> None:
    """Record a just-spawned server: its whole record after the start, in one write."""
    spec = desired.role(decision.role)
    before = store.role(decision.role)
    facts = records.ActionFacts(ok=True, exited=True, pid=pid, create_time=create_time)
    after = records.after_decision(before, spec, decision, RoleObservation(name=decision.role),
                                   facts, now)
    if after is not None:
        store.put_role(after)


def _facts(decision: Decision, outcome: Outcome | None) -> records.ActionFacts | None:
    """What the executor did, as the record rules read it (None: the decision did not act)."""
    if outcome is None or not decision.acts:
        return None
    return records.ActionFacts(ok=outcome.ok and not outcome.skipped, skipped=outcome.skipped,
                               exited=outcome.exited, pid=outcome.pid,
                               create_time=outcome.create_time, exposed=outcome.exposed)


def _write(store, before: RoleRecord | None, after: RoleRecord | None, root: str) -> None:
    if after is None:
        if before is not None:
            store.delete_role(before.name)
            instances.remove_dir(root, before.instance_id)
    elif after != before:
        store.put_role(after)
