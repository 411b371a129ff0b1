"""Restart backoff, restart counting and the residency ledger (PURE).

The rules ``plan()`` consults but that are not themselves a decision:

* ``delay(attempt, policy)`` — BEHAVIOUR §4: ``min(base·2^min(attempt,16), cap)``.
* ``restart_count(...)`` — the count a role carries into this pass: the
  ``stable_after`` reset and the operator-start reset.
* ``Ledger`` — BEHAVIOUR §7: who holds how many bytes, and whether a new
  reservation fits the budget and every exclusion.  A ledger lives only inside
  one ``plan()`` call (it is built from values and thrown away), so it is
  mutable without being shared state.
* ``place(drafts, budget, excludes)`` — the planner's decisions before memory,
  turned into final decisions: releases first, then claims (restarts, then
  starts/loads, each by port and name); a claim that does not fit becomes a
  ``refuse`` (unplaceable / excluded) that reserves nothing.
"""

from __future__ import annotations

import attrs

from reconciler.decisions import Decision, Reason, Status, Verb
from reconciler.desired import RestartPolicy
from reconciler.observed import Health, RoleRecord
from reconciler.units import format_size

#: Requeue hint for things that are in progress (loading, starting): polling,
#: not backoff (STYLE: "still loading, look again in 1 s" ≠ "crashed, wait 8 s").
POLL = 1.0


def delay(attempt: int, policy: RestartPolicy) -> float:
    """Seconds to wait after an exit before restart number ``attempt + 1``."""
    return float(min(policy.base * 2 ** min(max(attempt, 0), 16), policy.cap))


@attrs.frozen(kw_only=True)
class Retry:
    """Where a dead server (or an evicted Ollama model) stands in its backoff."""

    gave_up: bool  # the count reached max_restarts
    left: float  # seconds until the next attempt may run; <= 0 means now


def retry(restarts: int, exited_at: float, now: float, policy: RestartPolicy) -> Retry:
    """§4: give up at ``max_restarts``; otherwise wait ``delay(restarts)`` from the exit."""
    return Retry(
        gave_up=restarts >= policy.max_restarts,
        left=exited_at + delay(restarts, policy) - now,
    )


def restart_count(
    record: RoleRecord | None,
    policy: RestartPolicy,
    now: float,
    *,
    answering: bool,
    operator_start: bool,
) -> int:
    """The restart count this pass starts from.

    ``reconcile start NAME`` resets it to 0.  Otherwise only ``stable_after``
    does, and only on evidence: the server is answering *now* and has been
    since ``healthy_since`` for at least ``stable_after``.  (A dead server is
    judged by the count the shell persisted on the last pass that saw it
    answering, so a server that answers one probe and dies keeps counting.)
    """
    if operator_start or record is None:
        return 0
    if (
        answering
        and record.healthy_since is not None
        and now - record.healthy_since >= policy.stable_after
    ):
        return 0
    return record.restarts


def answering(health: Health | None) -> bool:
    return health is Health.UP


@attrs.frozen(kw_only=True)
class Refusal:
    """Why a reservation does not fit: a reason and a one-line message."""

    reason: Reason
    message: str


@attrs.define
class Ledger:
    """Bytes held per role, plus each holder's exclusions (BEHAVIOUR §7).

    A role that is resident holds an entry even with 0 bytes: residency is what
    exclusions look at.  ``claim`` tests a new reservation against every other
    holder; a role claiming again (a restart) replaces its own entry, so it is
    never counted twice.
    """

    budget: int | None
    held: dict[str, int] = attrs.field(factory=dict)
    excludes: dict[str, frozenset[str]] = attrs.field(factory=dict)

    def hold(self, name: str, size: int, excludes: frozenset[str] = frozenset()) -> None:
        self.held[name] = size
        self.excludes[name] = excludes

    def release(self, name: str) -> None:
        self.held.pop(name, None)
        self.excludes.pop(name, None)

    def total(self) -> int:
        return sum(self.held.values())

    def claim(self, name: str, need: int, excludes: frozenset[str]) -> Refusal | None:
        """Reserve ``need`` bytes for ``name``, or say why not (and change nothing)."""
        others = {k: v for k, v in self.held.items() if k != name}
        for other in sorted(others):
            if other in excludes:
                return Refusal(
                    reason=Reason.EXCLUDED,
                    message=f"'{name}' cannot be resident beside '{other}' ({name} excludes {other})",
                )
            if name in self.excludes.get(other, frozenset()):
                return Refusal(
                    reason=Reason.EXCLUDED,
                    message=f"'{name}' cannot be resident beside '{other}' ({other} excludes {name})",
                )
        if self.budget is not None:
            used = sum(others.values())
            if used + need > self.budget:
                return Refusal(reason=Reason.UNPLACEABLE, message=self._unplaceable(name, need, others))
        self.hold(name, need, excludes)
        return None

    def _unplaceable(self, name: str, need: int, others: dict[str, int]) -> str:
        assert self.budget is not None
        free = max(self.budget - sum(others.values()), 0)
        holders = ", ".join(f"{k} {format_size(v)}" for k, v in sorted(others.items()) if v > 0)
        held = f"held by {holders}" if holders else "nothing else is held"
        return (
            f"'{name}' needs {format_size(need)} but only {format_size(free)} "
            f"of the {format_size(self.budget)} budget is free ({held})"
        )


#: Execution order of acting verbs (BEHAVIOUR §7): unload → stop → restart → start/load.
ORDER = {Verb.UNLOAD: 0, Verb.STOP: 1, Verb.RESTART: 2, Verb.START: 3, Verb.LOAD: 3}
CLAIMS = (Verb.START, Verb.RESTART, Verb.LOAD)


def order_key(d: Decision) -> tuple[int, int, str]:
    return (ORDER.get(d.verb, 4), d.port or 0, d.role)


@attrs.frozen(kw_only=True)
class Draft:
    """A decision before memory is placed.

    ``holds`` is what the role holds while this pass runs (None = not resident):
    a running or backing-off server keeps its reservation; a claim's ``holds``
    is replaced by its ``reserve`` when it fits.  ``keeps_on_refusal``: a
    refused restart of a live server leaves it running, still holding.
    """

    decision: Decision
    holds: int | None = None
    keeps_on_refusal: bool = False


def place(
    drafts: list[Draft], budget: int | None, excludes: dict[str, frozenset[str]]
) -> list[Decision]:
    """§7: count every holder (planned releases already gone), then fit the claims."""
    ledger = Ledger(budget=budget)
    for draft in drafts:
        if draft.holds is not None:
            name = draft.decision.role
            ledger.hold(name, draft.holds, excludes.get(name, frozenset()))
    claims = sorted((dr for dr in drafts if dr.decision.verb in CLAIMS),
                    key=lambda dr: order_key(dr.decision))
    refusals: dict[str, Refusal] = {}
    pending = claims
    while pending:
        # A refusal may release a hold that blocked an earlier claim: go round
        # again with the still-refused ones until nothing more fits. Placing
        # only adds holds, and each claim is checked against every holder at
        # its time, so no two placed claims conflict.
        refusals = {}
        freed = False
        for draft in pending:
            d = draft.decision
            refusal = ledger.claim(d.role, d.reserve, excludes.get(d.role, frozenset()))
            if refusal is None:
                continue
            refusals[d.role] = refusal
            if not draft.keeps_on_refusal and d.role in ledger.held:
                ledger.release(d.role)
                freed = True
        still = [dr for dr in pending if dr.decision.role in refusals]
        if len(still) == len(pending) and not freed:
            break
        pending = still
    refused = {dr.decision.role: _refused(dr, refusals[dr.decision.role])
               for dr in pending if dr.decision.role in refusals}
    return [refused.get(dr.decision.role, dr.decision) for dr in drafts]


def _refused(draft: Draft, refusal: Refusal) -> Decision:
    """A claim that does not fit: nothing is reserved, a counted restart is not counted."""
    d = draft.decision
    counted = d.reason in (Reason.CRASHED, Reason.EVICTED)
    return attrs.evolve(
        d, verb=Verb.REFUSE, reason=refusal.reason, why=refusal.message,
        status=Status.UNPLACEABLE, detail=refusal.message, launch=None, model_tag=None,
        keep_alive=None, reserve=0, release=0 if draft.keeps_on_refusal else d.release,
        retry_in=None, restarts=d.restarts - 1 if counted else d.restarts)
