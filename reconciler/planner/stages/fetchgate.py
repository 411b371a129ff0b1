"""The fetch gate stage: a start whose Model (§14: or Program) is not here yet waits for it (PURE; BEHAVIOUR §1.6).

The rules are ``planner/fetchrungs.py``'s (wait ``fetching``, or refuse); this
stage applies them to every draft and keeps the fetches to start.
"""

from __future__ import annotations

import attrs

from reconciler.planner import fetchrungs
from reconciler.planner.stages.values import Drafted


def stage(d: Drafted) -> Drafted:
    v = d.views
    desired = v.inputs.desired
    # (most nodes fetch no Program: none of them has a source, and no role asks for one)
    programs = {r.name: p for r in desired.roles if r.managed
                and (p := desired.program_for(r)) is not None and p.source is not None
                } if any(p.source is not None for p in desired.programs) else {}
    drafts, fetches = fetchrungs.gate(d.drafts, v.specs, v.models,
                                      {f.model: f for f in v.inputs.observed.fetches}, v.node,
                                      programs)
    if drafts is d.drafts:
        return d  # most nodes: every Model was placed by hand, nothing is gated
    return attrs.evolve(d, drafts=tuple(drafts), fetches=d.fetches + fetches)
