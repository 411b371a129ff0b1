"""The device use stage: a server over its reservation on a device is degraded (PURE; §7.1).

What each pid uses on each device is observed (NVML or nvidia-smi); the rule
is ``placement.over_reserved``'s.
"""

from __future__ import annotations

import attrs

from reconciler.planner import placement
from reconciler.planner.stages.values import Placed


def stage(p: Placed) -> Placed:
    use = p.drafted.views.inputs.observed.device_use
    if not use:
        return p
    uses = placement.uses_by_pid(use)
    return attrs.evolve(p, decisions=tuple(placement.over_reserved(d, uses) for d in p.decisions))
