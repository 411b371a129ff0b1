"""The values that flow between the planner's stages (PURE), in the order they flow.

``Inputs`` (what ``plan()`` is given) → ``Views`` (the pass-wide tables, and one
typed ``Role`` per role) → ``Drafted`` (a draft per role and orphan, the
fetches to start, who eviction may stop) → ``Placed`` (a decision per draft,
and the room it was placed in) → ``Plan``. A stage takes one of them and gives
one; the values are built once per pass, never per role.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from reconciler.core.decisions import Decision, Fetch, PlanContext
from reconciler.core.demand import Demand
from reconciler.core.desired import Desired, ModelSpec, NodeConfig, RoleSpec
from reconciler.core.devices import Device
from reconciler.core.observed import ModelCheck, Observed, Remembered, RoleObservation, RoleRecord
from reconciler.core.positional import by_position
from reconciler.planner.launches import Bound
from reconciler.planner.ledger import Draft
from reconciler.planner.rungs import Role

frozen = attrs.frozen(kw_only=True, weakref_slot=False)  # (``core/positional``)


@frozen
class Inputs:
    """What ``plan()`` is given: the manifests' wish, the world, the store, the run, the clock."""

    desired: Desired
    observed: Observed
    remembered: Remembered
    ctx: PlanContext
    now: float


@frozen
class Views:
    """The pass-wide tables by name, and every role's view (``Role``), in name order."""

    inputs: Inputs
    node: NodeConfig
    models: Mapping[str, ModelSpec]
    specs: Mapping[str, RoleSpec]
    records: Mapping[str, RoleRecord]
    observations: Mapping[str, RoleObservation]
    checks: Mapping[str, ModelCheck]
    #: §10 roles of the set placed on other nodes (role → those nodes).
    elsewhere: Mapping[str, tuple[str, ...]]
    #: §4 the empty-manifest guard: nothing is stopped or forgotten.
    guard: bool
    launcher: Bound
    #: §2 per shared server (host, port): each model named there, with its roles.
    served: Mapping[tuple[str, int], list[tuple[str, set[str]]]]
    roles: tuple[Role, ...]

    @property
    def now(self) -> float:
        return self.inputs.now

    @property
    def demand(self) -> Demand | None:
        return self.inputs.observed.demand


@frozen
class OnDemand:
    """§9 the on-demand roles eviction looks at (role → when last used / seconds to wait)."""

    idle: Mapping[str, float] = {}  # may be evicted now → when last used
    later: Mapping[str, float] = {}  # may make room later → in how many seconds
    claimants: frozenset[str] = frozenset()  # whose refused claim may wait for them


@frozen
class Drafted:
    """A draft per role (and per orphan), before memory and devices are placed."""

    views: Views
    drafts: tuple[Draft, ...]
    #: §7.1 the roles whose claims placement gives devices (for their launches).
    claimants: Mapping[str, Role]
    on_demand: OnDemand
    fetches: tuple[Fetch, ...] = ()  # §1.6 started before the decisions are applied


@frozen
class Room:
    """What placement fits the claims into (§7, §7.1): the budget, the exclusions, devices."""

    budget: int | None
    excludes: Mapping[str, frozenset[str]]
    together: Mapping[str, frozenset[str]]
    devices: tuple[Device, ...]
    broken: Mapping[str, str] | None
    #: §12 instance → group, for groups whose instances never share a device.
    apart: Mapping[str, str] = {}


@frozen
class Placed:
    """A decision per draft (same order), and the room they were placed in."""

    drafted: Drafted
    room: Room
    decisions: tuple[Decision, ...]


#: The makers the stages build them with, by keyword as the classes are (``core/positional``:
#: attrs' frozen ``__init__`` costs a setattr call per field; a pass builds one of each per
#: node, a fleet's pass one per node of it).
make_inputs = by_position(Inputs)
make_views = by_position(Views)
make_drafted = by_position(Drafted)
make_room = by_position(Room)
make_placed = by_position(Placed)
