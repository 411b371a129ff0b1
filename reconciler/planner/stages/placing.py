"""The placement stage: memory and devices for every claim (PURE; BEHAVIOUR §7, §7.1).

``stage`` builds the ``Room`` (the budget, the exclusions, roles resident
together, the declared devices and those found unusable) and places the
drafts in it with ``ledger.place``; a claim placed on devices gets a launch
that follows them (``rungs.placed_launch``). ``place`` places any drafts in
the same room again: the eviction stage tries stops with it.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

from reconciler.core.decisions import Decision
from reconciler.planner import ledger, placement
from reconciler.planner.ledger import Draft
from reconciler.planner.rungs import placed_launch
from reconciler.planner.stages.values import Drafted, Placed, Room, make_placed, make_room


def stage(d: Drafted) -> Placed:
    v = d.views
    node = v.node
    devices = node.devices
    room = make_room(
        budget=node.memory_budget,
        excludes={name: spec.excludes for name, spec in v.specs.items() if spec.excludes},
        together={name: frozenset(group - {name}) for here in v.served.values()
                  for _, group in here if len(group) > 1 for name in group},
        devices=devices,
        broken=placement.unusable(devices, v.inputs.observed.devices) if devices else None,
        apart=_apart(v.specs) if devices else {})
    return make_placed(drafted=d, room=room, decisions=tuple(place(d, room, d.drafts)))


def place(d: Drafted, room: Room, drafts: Sequence[Draft]) -> list[Decision]:
    """``drafts`` placed in ``room``: one decision each, in their order."""
    # §7.1 a claim on devices: its launch follows them (a partial: no Python call of its own)
    return ledger.place(list(drafts), room.budget, room.excludes, room.together, room.devices,
                        room.broken, partial(placed_launch, d.claimants), room.apart)


def _apart(specs) -> dict[str, str]:
    """§12 instance → group, for every group of instances on devices that may not share one
    (``placement.devices.shared_by_replicas`` unset)."""
    return {name: spec.group for name, spec in specs.items()
            if spec.replicas > 1 and spec.devices is not None and not spec.shared_by_replicas}
