"""The last stage: the decisions in execution order, and when to look again (PURE; §7, §4.1).

Execution order is ``ledger.order_key``'s (unload → stop → restart →
start/load, each by port and name). The requeue is the earliest of every
decision's ``retry_in`` and the liveness checks next due.
"""

from __future__ import annotations

from reconciler.core.decisions import Plan
from reconciler.core.positional import by_position
from reconciler.planner import ledger, livenessrungs
from reconciler.planner.stages.values import Placed

#: ``Plan(…)`` without attrs' setattr per field (``core/positional``): one per node per pass.
_plan = by_position(Plan)


def stage(p: Placed) -> Plan:
    v = p.drafted.views
    ordered = tuple(sorted(p.decisions, key=ledger.order_key))
    hints = [d.retry_in for d in ordered if d.retry_in is not None]
    hints += livenessrungs.wakes(v.specs, v.records, v.observations, v.now)
    return _plan(decisions=ordered, requeue_after=min(hints) if hints else None,
                fetches=p.drafted.fetches)
