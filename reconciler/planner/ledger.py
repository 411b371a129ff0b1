"""The residency ledger: who holds how much memory, and which claims fit (PURE; BEHAVIOUR §7).

``place(drafts, budget, excludes)`` turns the planner's decisions before
memory into final decisions: every holder is counted first (what planned
stops, unloads and give-ups release is already gone), then the claims
(restarts, then starts/loads; within each, claims for fixed device ids first,
then by port and name) are fitted; a claim that does not fit becomes a
``refuse`` (unplaceable / excluded) that reserves nothing.

It runs in time linear in the roles (``bench/bench_plan.py``): the ledger
keeps a running total and indexes exclusions both ways, so a claim costs
O(1 + its exclusions) instead of a scan of every holder; and the fixpoint
(a refusal that frees memory may unblock an earlier claim) retries only the
claims that something freed since their last try could unblock. Its
decisions are exactly those of the quadratic ledger it replaced, which
``tests/plan/oracle_ledger.py`` keeps as the oracle of a differential test.

A ``Ledger`` lives only inside one ``place()`` call (built from values and
thrown away), so it is mutable without being shared state.

Size: the linear-time ledger (its running totals and two-way exclusion index)
and the fixpoint that drives it, with device claims beside the host's: one
accounting, kept whole so it stays differential-tested against its oracle.
"""

from __future__ import annotations

import heapq
from typing import Callable, Mapping, Sequence

import attrs

from reconciler.core.decisions import Decision, Reason, Refuse, Status, Verb
from reconciler.core.devices import Assignment, Device
from reconciler.core.units import format_size
from reconciler.planner.placement import Claim, DeviceLedger

#: Execution order of acting verbs (BEHAVIOUR §7): unload → stop → restart → start/load.
ORDER = {Verb.UNLOAD: 0, Verb.STOP: 1, Verb.RESTART: 2, Verb.START: 3, Verb.LOAD: 3}
CLAIMS = (Verb.START, Verb.RESTART, Verb.LOAD)


def order_key(d: Decision) -> tuple[int, int, str]:
    return (ORDER.get(d.verb, 4), d.port or 0, d.role)


def claim_order(draft: Draft) -> tuple[int, bool, int, str]:
    """The order claims are placed in (§7.1): by verb, then a claim for fixed device ids
    before any other (as ``validate`` places them: a ``count`` claim placed first could take
    the one device a fixed-ids claim can use, and a running role is never moved), then by
    port and name."""
    d, claim = draft.decision, draft.claim
    return (ORDER.get(d.verb, 4), not (claim is not None and claim.request.ids), d.port or 0,
            d.role)


@attrs.define(kw_only=True)
class Draft:
    """A decision before memory is placed (never changed once built: ``rungs._STEADY`` hands
    a keep's out again, pass after pass; not frozen, as ``Role`` is not: it never leaves the
    planner, and one is built per role per pass).

    ``holds`` is what the role holds while this pass runs (None = not resident):
    a running or backing-off server keeps its reservation; a claim's ``holds``
    is replaced by its ``reserve`` when it fits.  ``keeps_on_refusal``: a
    refused restart of a live server leaves it running, still holding.
    """

    decision: Decision
    holds: int | None = None
    keeps_on_refusal: bool = False
    #: (device, bytes) held on devices while ``holds`` is not None (§7.1).
    devices: tuple[tuple[str, int], ...] = ()
    #: What a claim asks of the devices (None: host memory only).
    claim: Claim | None = None


@attrs.frozen(kw_only=True)
class Refusal:
    """Why a reservation does not fit: a reason and a one-line message."""

    reason: Reason
    message: str


class Ledger:
    """Bytes held per role, and the exclusions between holders (BEHAVIOUR §7).

    A resident role holds an entry even with 0 bytes: residency is what
    exclusions look at. A role claiming again (a restart) replaces its own
    entry, so it is never counted twice. ``loosened`` counts the events that
    can make a refused claim fit (a holder leaves, or a hold shrinks):
    between two of them, a refused claim stays refused, because holds only
    grow.
    """

    def __init__(self, budget: int | None, excludes: Mapping[str, frozenset[str]],
                 together: Mapping[str, frozenset[str]] | None = None,
                 devices: DeviceLedger | None = None) -> None:
        self.budget = budget
        self.devices = devices
        self.held: dict[str, int] = {}
        self.used = 0  # the running total of ``held``
        self.loosened = 0
        self._stated = excludes  # role → the roles its manifest excludes (for messages)
        self._together = together or {}
        # role → the roles it may not be resident beside (static for a pass)
        self._excludes = _spread(excludes, self._together) if self._together else excludes
        self._excluders: dict[str, set[str]] = {}  # role → the holders that exclude it
        self._text: _HoldersText | None = None  # "held by …", built once per state

    def hold(self, name: str, size: int, pairs: tuple[tuple[str, int], ...] | None = None
             ) -> None:
        """``name`` holds ``size`` bytes, and ``pairs`` on devices (``()`` gives up any it
        held there; None leaves them as they are): one call per holder."""
        old = self.held.get(name)
        if old is None:
            for other in self._excludes.get(name, ()):
                self._excluders.setdefault(other, set()).add(name)
        elif size < old:
            self.loosened += 1
        self.used += size - (old or 0)
        self.held[name] = size
        self._text = None
        devices = self.devices
        if pairs is not None and devices is not None and (pairs or name in devices.held):
            if devices.hold(name, pairs):
                self.loosened += 1

    def release(self, name: str) -> None:
        if self.devices is not None and self.devices.release(name):
            self.loosened += 1
        size = self.held.pop(name, None)
        if size is None:
            return
        self.used -= size
        for other in self._excludes.get(name, ()):
            self._excluders[other].discard(name)
        self.loosened += 1
        self._text = None

    def fits(self, name: str, need: int) -> bool:
        """Would ``need`` bytes for ``name`` fit the budget and every exclusion?"""
        if self._conflicts(name):
            return False
        return self.budget is None or self.used - self.held.get(name, 0) + need <= self.budget

    def refusal(self, name: str, need: int) -> Refusal | None:
        """Why ``need`` bytes for ``name`` do not fit (the first excluder by name), or None."""
        conflicts = self._conflicts(name)
        if conflicts:
            other = min(conflicts)
            return Refusal(reason=Reason.EXCLUDED, message=(
                f"'{name}' cannot be resident beside '{other}' ({self._who(name, other)})"))
        if self.fits(name, need):
            return None
        assert self.budget is not None
        free = max(self.budget - (self.used - self.held.get(name, 0)), 0)
        if self._text is None:
            self._text = _HoldersText(self.held)
        head = (f"'{name}' needs {format_size(need)} but only {format_size(free)} "
                f"of the {format_size(self.budget)} budget is free (")
        return Refusal(reason=Reason.UNPLACEABLE, message=self._text.sentence(head, name, ")"))

    def _conflicts(self, name: str) -> list[str]:
        """Holders ``name`` excludes, and holders that exclude ``name`` (itself aside).

        And the roles resident whenever ``name`` is, if it excludes one of them
        or one excludes it: such a claim can never be placed.
        """
        mine = self._excludes.get(name, ())
        if not mine and name not in self._excluders and name not in self._together:
            return []  # the common case: no exclusion names it (every claim of every pass)
        out = [o for o in mine if o != name and o in self.held]
        out += [o for o in self._excluders.get(name, ()) if o != name]
        for other in self._together.get(name, ()):
            if other in mine or name in self._excludes.get(other, ()):
                out.append(other)
        return out

    def _who(self, name: str, other: str) -> str:
        """Which exclusion of the manifests keeps ``name`` from ``other``, in words."""
        stated = self._stated
        if other in stated.get(name, ()):
            return f"{name} excludes {other}"
        if name in stated.get(other, ()):
            return f"{other} excludes {name}"
        # Through roles resident together (one Ollama model serves both).
        for a in sorted(self._together.get(name, frozenset()) | {name}):
            for b in sorted(self._together.get(other, frozenset()) | {other}):
                said = (f"{a} excludes {b}" if b in stated.get(a, ())
                        else f"{b} excludes {a}" if a in stated.get(b, ()) else None)
                if said is not None:
                    notes = [f"{x} is resident whenever {y} is"
                             for x, y in ((a, name), (b, other)) if x != y]
                    return "; ".join([said, *notes])
        raise AssertionError(f"no exclusion keeps {name} from {other}")


#: A refusal names at most this many other holders; past it, the largest, and a count.
NAMED = 8


class _HoldersText:
    """``a 1.0 GB, b 2.0 GB``: the holders of more than 0 bytes a refusal names (§7).

    Up to ``NAMED`` other holders, every one by name; past that the ``NAMED``
    largest, largest first, then ``and 4,992 more (12.0 TB)``: a line an operator
    can read, built in time linear in the holders once per ledger state (a
    claimant's own entry is left out per refusal).
    """

    def __init__(self, held: Mapping[str, int]) -> None:
        positive = [(name, size) for name, size in held.items() if size > 0]
        self.count, self.total = len(positive), sum(size for _, size in positive)
        self.few = len(positive) <= NAMED + 1  # one of them may be the claimant
        self.top = (sorted(positive) if self.few else  # by name; else largest first
                    heapq.nsmallest(NAMED + 1, positive, key=lambda p: (-p[1], p[0])))
        self.held = held

    def sentence(self, head: str, name: str, tail: str) -> str:
        """``head`` + "held by …" without ``name``'s entry + ``tail``."""
        own = self.held.get(name, 0)
        others = [(who, size) for who, size in self.top if who != name]
        count = self.count - (1 if own > 0 else 0)
        if not count:
            return f"{head}nothing else is held{tail}"
        if count > NAMED:  # the largest first
            others.sort(key=lambda p: (-p[1], p[0]))
        named = ", ".join(f"{who} {format_size(size)}" for who, size in others[:NAMED])
        if count <= NAMED:
            return f"{head}held by {named}{tail}"
        rest = self.total - own - sum(size for _, size in others[:NAMED])
        return (f"{head}held by {named} and {count - NAMED:,} more "
                f"({format_size(rest)}){tail}")


def _spread(excludes: Mapping[str, frozenset[str]],
            together: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Exclusions over roles resident together: each is excluded as the others are.

    Roles that serve one Ollama model on one server are in memory together or
    not at all, so a role that excludes one of them excludes them all, and
    each of them excludes what any of them excludes.
    """
    def group(name: str) -> frozenset[str]:
        return together.get(name, frozenset()) | {name}

    out: dict[str, frozenset[str]] = {}
    for name in excludes.keys() | together.keys():
        out[name] = frozenset(
            role for member in group(name) for other in excludes.get(member, ())
            for role in group(other))
    return out


def place(
    drafts: list[Draft], budget: int | None, excludes: Mapping[str, frozenset[str]],
    together: Mapping[str, frozenset[str]] | None = None,
    devices: Sequence[Device] = (), broken: Mapping[str, str] | None = None,
    placed: Callable[[Decision, Assignment], Decision] | None = None,
    apart: Mapping[str, str] | None = None,
) -> list[Decision]:
    """§7: count every holder (planned releases already gone), then fit the claims.

    ``together`` maps a role to the roles resident whenever it is (Ollama
    roles sharing one model on one server); none by default. ``devices``: the
    node's declared devices, ``broken`` those discovery found missing or
    smaller (§7.1): a claim with a device request gets its devices here, and
    ``placed(decision, assignment)`` makes its final decision (the planner's
    builds the launch on those devices too); by default the devices are set. ``apart``:
    §12 instance → group, for the groups whose instances never share a device.
    """
    ledger = Ledger(budget, excludes, together,
                    DeviceLedger(devices, broken, apart) if devices else None)
    for draft in drafts:
        if draft.holds is not None:
            ledger.hold(draft.decision.role, draft.holds, draft.devices or None)
    assigned: dict[str, Assignment] = {}
    pending = sorted([dr for dr in drafts if dr.decision.verb in CLAIMS], key=claim_order)
    tried: dict[str, int] = {}  # refused claim → ``ledger.loosened`` at its last try
    while pending:
        # A refusal may release a hold that blocked an earlier claim: go round
        # again with the refused ones, but try only those that something freed
        # since their last try could unblock. Placing only adds holds, and each
        # claim is checked against every holder at its time, so no two placed
        # claims conflict.
        still = []
        for draft in pending:
            d = draft.decision
            if tried.get(d.role) == ledger.loosened:
                still.append(draft)  # nothing left since: refused as before
            elif ledger.fits(d.role, reserve := d.reserve) and (
                    draft.claim is None or _picked(ledger, d.role, draft.claim, assigned)):
                # A claim without devices (placement.devices removed) gives up any it held.
                ledger.hold(d.role, reserve, assigned[d.role].pairs() if draft.claim else ())
            else:
                if not draft.keeps_on_refusal:
                    ledger.release(d.role)
                tried[d.role] = ledger.loosened
                still.append(draft)
        pending = still
        if all(tried[dr.decision.role] == ledger.loosened for dr in still):
            break
    # Nothing changes any more: every refusal says why against the final ledger.
    refused = {}
    for draft in pending:
        refusal = ledger.refusal(draft.decision.role, draft.decision.reserve)
        if refusal is None:
            assert draft.claim is not None, draft
            name = draft.decision.role
            refusal = Refusal(reason=Reason.UNPLACEABLE, message=(
                ledger.devices.refusal(name, draft.claim) if ledger.devices is not None
                else f"{name} asks for {draft.claim.request}; the node declares no devices"))
        refused[draft.decision.role] = _refused(draft, refusal)
    out = []
    for dr in drafts:
        d = refused.get(dr.decision.role, dr.decision)
        if d.verb in CLAIMS and d.role in assigned:
            got = assigned[d.role]
            d = placed(d, got) if placed is not None else attrs.evolve(d, devices=got.pairs())
        elif d.verb in CLAIMS and d.devices:
            d = attrs.evolve(d, devices=())
        out.append(d)
    return out


def _picked(ledger: Ledger, name: str, claim: Claim, assigned: dict[str, Assignment]) -> bool:
    """Pick ``claim``'s devices into ``assigned``; False when no device fits (§7.1)."""
    if ledger.devices is None:
        return False
    assignment = ledger.devices.pick(name, claim)
    if assignment is None:
        return False
    assigned[name] = assignment
    return True


def _refused(draft: Draft, refusal: Refusal) -> Decision:
    """A claim that does not fit: nothing is reserved, a counted restart is not counted."""
    d = draft.decision
    counted = d.reason in (Reason.CRASHED, Reason.EVICTED)
    return attrs.evolve(
        d, act=Refuse(running=d.process), reason=refusal.reason, why=refusal.message,
        status=Status.UNPLACEABLE, detail=refusal.message, devices=(),
        release=0 if draft.keeps_on_refusal else d.release,
        retry_in=None, restarts=d.restarts - 1 if counted else d.restarts)
