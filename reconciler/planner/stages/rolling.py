"""The rolling-update stage: a new generation reaches a group one instance at a time (PURE; §12).

A role with ``replicas`` ≥ 2 is a group of instances. When its generation
changes (a new launch, ``restarted_at``), the ladder drafts a restart for every
running instance; this stage lets at most one of them go, and only while no
other instance of the group is away (starting, crashed, in backoff, gave up): the others
``wait`` with reason ``rolling_update``, still serving the previous generation,
and the next goes once the restarted one answers. The lowest index goes first.
An instance that gave up on the new generation stops the rollout there: the
others keep the previous generation running, and their wait says so. A group of
one instance restarts as every role does.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from reconciler.core.decisions import Reason, Status, Verb
from reconciler.core.instances import group_of, replica_of
from reconciler.planner.ledger import Draft
from reconciler.planner.rungs import draft
from reconciler.planner.stages.values import Drafted


def stage(d: Drafted) -> Drafted:
    v = d.views
    if "/" not in "\n".join(v.specs):  # (the names joined: one scan in C)
        return d  # the common case: no role has replicas
    groups: dict[str, list[int]] = defaultdict(list)  # group → indexes of its drafts
    for i, dr in enumerate(d.drafts):
        name = dr.decision.role
        spec = v.specs.get(name)
        if spec is not None and spec.replicas > 1:
            groups[group_of(name)].append(i)
    drafts = list(d.drafts)
    roles = {r.name: r for r in v.roles}
    for members in groups.values():
        members.sort(key=lambda i: replica_of(drafts[i].decision.role))
        update = [i for i in members if _updates(drafts[i])]
        if not update:
            continue
        busy = [i for i in members if i not in update and _away(drafts[i])]
        if busy:
            first = drafts[busy[0]].decision
            gave_up = first.status is Status.GAVE_UP
            why = (f"stopped: {first.role} gave up on the new generation"
                   if gave_up else f"waits for {first.role} ({first.status}) to be ready")
            go = []
        else:
            go = update[:1]
            why = f"{drafts[go[0]].decision.role} first"
        for i in update:
            if i not in go:
                drafts[i] = _wait(roles[drafts[i].decision.role], drafts[i], why)
    return attrs.evolve(d, drafts=tuple(drafts))


def _updates(dr: Draft) -> bool:
    """A running instance about to be restarted for a new generation."""
    dec = dr.decision
    return dec.verb is Verb.RESTART and dec.reason is Reason.SPEC_CHANGED


#: Where an instance is on its way back (or failing to come back): not serving for now.
_COMING = frozenset({Status.STARTING, Status.LOADING, Status.EXITED, Status.BACKOFF,
                     Status.GAVE_UP})


def _away(dr: Draft) -> bool:
    """Away for now: being restarted, starting, crashed, in backoff, gave up. An instance
    that was not serving (not started yet, stopped, refused, unplaceable, on demand and not
    asked for) is not away: its start takes nothing from the group's service, and one that
    cannot run at all would hold the rollout for ever (placement comes after this stage)."""
    dec = dr.decision
    return dec.verb is Verb.RESTART or dec.status in _COMING


def _wait(r, dr: Draft, why: str) -> Draft:
    """The restart held back: the instance keeps running (and holding) its previous generation."""
    dec = dr.decision
    return draft(r, Verb.WAIT, Reason.ROLLING_UPDATE, Status.RUNNING,
                 f"running the previous generation; rolling update {why}", why=why,
                 holds=r.reserved,
                 retry_in=dec.retry_in)
