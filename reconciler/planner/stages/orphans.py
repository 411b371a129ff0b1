"""The orphans stage: a draft for each server of ours that no role wants (PURE; BEHAVIOUR §4).

The decision itself is ``planner/orphans.py``'s; this stage adds those drafts
after the roles' (a role's own decision covers an orphan of its name).
"""

from __future__ import annotations

import attrs

from reconciler.planner import orphans
from reconciler.planner.stages.values import Drafted


def stage(d: Drafted) -> Drafted:
    v = d.views
    found = v.inputs.observed.orphans
    if not found:
        return d
    extra = orphans.drafts(found, set(v.specs) | set(v.records), v.guard)
    return attrs.evolve(d, drafts=d.drafts + tuple(extra))
