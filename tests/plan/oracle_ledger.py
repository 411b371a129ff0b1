"""The residency ledger as it was before round 2: the oracle of the linear one (test helper).

Kept verbatim but for one rule of round 3 (a refusal names at most ``NAMED``
other holders, the largest, then a count) (``claim`` scans every holder; ``place`` re-runs every refused
claim while anything changes) so that ``tests/plan/test_ledger.py`` can check,
decision for decision, that ``reconciler.ledger.place`` decides exactly what
this one did. Quadratic, and correct by long use: do not optimise it.
"""

from __future__ import annotations

import attrs

from reconciler.core.decisions import Decision, Reason, Refuse, Status, Verb
from reconciler.planner.ledger import CLAIMS, NAMED, Draft, order_key
from reconciler.core.units import format_size


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
        positive = sorted((k, v) for k, v in others.items() if v > 0)
        holders = ", ".join(f"{k} {format_size(v)}" for k, v in positive)
        if len(positive) > NAMED:  # round 3: the NAMED largest, then a count (§7)
            big = sorted(positive, key=lambda p: (-p[1], p[0]))
            holders = (", ".join(f"{k} {format_size(v)}" for k, v in big[:NAMED])
                       + f" and {len(big) - NAMED:,} more "
                       f"({format_size(sum(v for _, v in big[NAMED:]))})")
        held = f"held by {holders}" if holders else "nothing else is held"
        return (
            f"'{name}' needs {format_size(need)} but only {format_size(free)} "
            f"of the {format_size(self.budget)} budget is free ({held})"
        )


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
        d, act=Refuse(running=d.process), reason=refusal.reason, why=refusal.message,
        status=Status.UNPLACEABLE, detail=refusal.message,
        release=0 if draft.keeps_on_refusal else d.release,
        retry_in=None, restarts=d.restarts - 1 if counted else d.restarts)
