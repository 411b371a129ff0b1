"""Eviction: idle on-demand roles make room for a claim that does not fit (PURE; BEHAVIOUR §9).

``evict(drafts, decisions, idle, place)`` runs after the ledger has placed
the pass (``ledger.place``). For each claim the ledger refused for memory or
an exclusion (in execution order), it stops idle on-demand roles, least
recently used first, until the claim fits::

    - stop chat :8091 (evicted: for coder)

The rules:

* only roles in ``idle`` may go: on-demand roles that are running, have no
  request waiting for them to be ready and have run ``min_residency`` (the
  planner picks them; requests in flight are drained by the router before the
  stop). A ``running`` (always-on) role or any other role is never evicted;
* nothing is evicted in vain: when stopping *every* idle role would still
  not make the claim fit, none is stopped, and the claim stays refused with
  the ledger's message naming who holds the memory;
* as few as the LRU order allows: roles are taken one at a time, oldest use
  first (ties by name), and taking stops as soon as the claim fits;
* only from the devices the claim needs (§7.1): a role holding device memory
  whose stop the claim turns out not to need (it was on another device) is
  kept running.
* §12 never another instance of the claimant's own role: a spillover instance
  does not swap out the instance whose full queue asked for it.

Each try re-runs the whole placement with the chosen roles stopped, so every
ledger rule (the budget, exclusions both ways, roles resident together, the
fixpoint over refusals) holds for the result exactly as it does for any pass.
That costs one placement per evicted role; on-demand roles are few.

``contended`` then turns a refused on-demand claim into a wait when the
roles that may go *later* (not yet resident long enough, or serving their own
queue) would make it fit: its requests stay queued, and the refusal (503) is
kept for claims no eviction could ever cure.
"""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Sequence

import attrs

from reconciler.core.decisions import Decision, Forget, Reason, Status, Stop, Verb, Wait
from reconciler.core.instances import group_of
from reconciler.planner.ledger import CLAIMS, Draft, order_key

Place = Callable[[list[Draft]], list[Decision]]

#: The ledger's refusals: what stopping another role can cure.
_LEDGER_REFUSALS = (Reason.UNPLACEABLE, Reason.EXCLUDED)


def evict(drafts: Sequence[Draft], decisions: Sequence[Decision], idle: Mapping[str, float],
          place: Place) -> list[Decision]:
    """The decisions with idle on-demand roles stopped for the claims they unblock."""
    lru = sorted(idle, key=lambda name: (idle[name], name))
    on_devices = {dr.decision.role: bool(dr.devices) for dr in drafts}
    current = {d.role: d for d in decisions}
    evicted: dict[str, str] = {}  # evicted role → the claim it made room for
    claims = sorted((dr.decision for dr in drafts if dr.decision.verb in CLAIMS),
                    key=order_key)
    for claim in claims:
        if not _refused_by_ledger(current[claim.role]):
            continue
        pool = [name for name in lru if name not in evicted and not _kin(name, claim.role)]
        if not pool:
            continue
        everything = _placed(place, drafts, {**evicted, **{n: claim.role for n in pool}})
        if _refused_by_ledger(everything[claim.role]):
            continue  # no eviction would make it fit: stop nothing for it
        for name in pool:
            evicted[name] = claim.role
            current = _placed(place, drafts, evicted)
            if not _refused_by_ledger(current[claim.role]):
                break
        # §7.1 a role on devices the claim did not need is not stopped for it:
        # LRU order may have taken one on another device before the one that helps.
        for name in [n for n in pool if evicted.get(n) == claim.role and on_devices.get(n)]:
            del evicted[name]
            kept = _placed(place, drafts, evicted)
            if _refused_by_ledger(kept[claim.role]):
                evicted[name] = claim.role
            else:
                current = kept
    return [current[d.role] for d in decisions]


def _kin(name: str, claimant: str) -> bool:
    """The claimant itself, or (§12) another instance of its role: never stopped for it
    (one copy swapped for another makes no room for the role's requests)."""
    return name == claimant or group_of(name) == group_of(claimant)


def _refused_by_ledger(d: Decision) -> bool:
    return d.verb is Verb.REFUSE and d.reason in _LEDGER_REFUSALS


def _placed(place: Place, drafts: Sequence[Draft], evicted: Mapping[str, str]
            ) -> dict[str, Decision]:
    """Every decision of a placement in which the ``evicted`` roles are stopped."""
    return {d.role: d for d in place([_stopped(dr, evicted[dr.decision.role])
                                      if dr.decision.role in evicted else dr
                                      for dr in drafts])}


def _stopped(draft: Draft, claimant: str) -> Draft:
    """A kept idle role turned into its stop: it releases what it holds, it holds nothing."""
    d = draft.decision
    # (``contended`` also tries roles that are not running yet: a stop of nothing, that only
    # releases; ``evict`` stops only idle roles, which run: their process is the target.)
    stop = attrs.evolve(
        d, act=Stop(target=d.process) if d.process is not None else Forget(),
        reason=Reason.EVICTED, why=f"for {claimant}", status=Status.RUNNING,
        detail=f"on-demand, idle; stopped to make room for {claimant}",
        release=draft.holds or 0, retry_in=None)
    return Draft(decision=stop)


def contended(drafts: Sequence[Draft], decisions: Sequence[Decision],
              holders: Mapping[str, float], claimants: Collection[str],
              place: Place) -> list[Decision]:
    """§9 a claim of a ``claimants`` role still refused waits instead, when stopping the
    on-demand ``holders`` (role → seconds until it may go) would make it fit: its
    requests stay queued and the swap comes when a holder may go. A claim that would not
    fit even then stays refused (held by always-on roles, or bigger than the budget)."""
    current = {d.role: d for d in decisions}
    for claim in sorted((dr.decision for dr in drafts if dr.decision.verb in CLAIMS),
                        key=order_key):
        refused = current[claim.role]
        if claim.role not in claimants or not _refused_by_ledger(refused):
            continue
        pool = {name: left for name, left in holders.items() if not _kin(name, claim.role)}
        if not pool or _refused_by_ledger(
                _placed(place, drafts, {n: claim.role for n in pool})[claim.role]):
            continue
        names = ", ".join(sorted(pool))
        current[claim.role] = attrs.evolve(
            refused, act=Wait(running=refused.process), why=f"waits for {names} to make room",
            detail=f"{refused.detail}; waits until {names} may be evicted",
            retry_in=min(pool.values()))
    return [current[d.role] for d in decisions]
