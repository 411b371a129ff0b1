"""The eviction stage: idle on-demand roles stopped for a claim that does not fit (PURE; §9).

The rules are ``planner/eviction.py``'s: a claim the ledger refused may stop
idle on-demand roles, least recently used first (``evict``), and waits for
the ones that may go later rather than being refused (``contended``). Each
try places the drafts again in the same room (``placing.place``).
"""

from __future__ import annotations

import functools

import attrs

from reconciler.planner import eviction
from reconciler.planner.stages import placing
from reconciler.planner.stages.values import Placed


def stage(p: Placed) -> Placed:
    d, wanted = p.drafted, p.drafted.on_demand
    if not wanted.idle and not wanted.later:
        return p
    place = functools.partial(placing.place, d, p.room)
    drafts, decisions = list(d.drafts), list(p.decisions)
    if wanted.idle:
        # §9 a claim that does not fit may stop idle on-demand roles, LRU first.
        decisions = eviction.evict(drafts, decisions, wanted.idle, place)
    if wanted.later:
        # §9 … and waits for the ones that may go later, rather than being refused.
        decisions = eviction.contended(drafts, decisions,
                                       {**wanted.later, **{n: 0.0 for n in wanted.idle}},
                                       wanted.claimants, place)
    return attrs.evolve(p, decisions=tuple(decisions))
