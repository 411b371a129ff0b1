"""The residency ledger as a plan leaves it, for people (PURE; BEHAVIOUR §7, §11).

``plan --json`` prints it under ``ledger`` and the status page draws it as a
bar: one ``MemoryBar`` per memory pool (host RAM today; a device's memory is
one more bar of the same shape). A role holds, once the plan's actions are
done, ``reserved − release + reserve`` (``plan.py``'s rule); after a pass
that acted, the store's ``reserved`` already is that, so the daemon's page
passes ``applied=True``. An on-demand role that holds memory can be evicted
for another (§9): it is marked.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from reconciler.core.decisions import Plan
from reconciler.core.desired import Desired
from reconciler.planner import placement

HOST_RAM = "host RAM"


@attrs.frozen(kw_only=True)
class Holding:
    """What one role holds in a pool, and whether the router may evict it."""

    role: str
    held: int  # bytes
    evictable: bool = False
    observed: int | None = None  # bytes the role's process really uses (RSS), when known


@attrs.frozen(kw_only=True)
class MemoryBar:
    """One memory pool: its budget and who holds what in it."""

    name: str = HOST_RAM
    budget: int | None = None  # bytes; None: no budget
    holdings: tuple[Holding, ...] = ()

    @property
    def held(self) -> int:
        return sum(h.held for h in self.holdings)

    @property
    def scale(self) -> int:
        """The bytes the bar's full width stands for: the budget, or what is held beyond it."""
        return max(self.budget or 0, self.held, 1)


def held_after(plan: Plan, reserved: Mapping[str, int], *, applied: bool) -> dict[str, int]:
    """Each role's bytes once the plan's actions are done (``applied``: they are, already)."""
    out: dict[str, int] = {}
    for d in plan.decisions:
        before = reserved.get(d.role, 0)
        now = before if applied or not d.acts else max(before - d.release, 0) + d.reserve
        if now:
            out[d.role] = now
    return out


def host_ram(plan: Plan, reserved: Mapping[str, int], desired: Desired | None, *,
             applied: bool, observed: Mapping[str, int] | None = None) -> MemoryBar:
    """The host-RAM bar of ``plan``: the NodeConfig's budget, the holdings in plan order."""
    held = held_after(plan, reserved, applied=applied)
    on_demand = {r.name for r in desired.roles if r.on_demand} if desired is not None else set()
    observed = observed or {}
    return MemoryBar(
        name=HOST_RAM,
        budget=desired.node.memory_budget if desired is not None else None,
        holdings=tuple(Holding(role=d.role, held=held[d.role], evictable=d.role in on_demand,
                               observed=observed.get(d.role))
                       for d in plan.decisions if d.role in held))


def device_bars(plan: Plan, desired: Desired | None) -> tuple[MemoryBar, ...]:
    """One bar per declared device (§7.1): its memory, and what each role holds on it once
    the plan's actions are done, in plan order."""
    if desired is None or not desired.node.devices:
        return ()
    on_demand = {r.name for r in desired.roles if r.on_demand}
    held = {d.role: dict(placement.held_after(d)) for d in plan.decisions}
    return tuple(
        MemoryBar(name=device.id, budget=device.memory, holdings=tuple(
            Holding(role=d.role, held=held[d.role][device.id], evictable=d.role in on_demand)
            for d in plan.decisions if held[d.role].get(device.id)))
        for device in sorted(desired.node.devices, key=lambda x: placement.device_order(x.id)))


def as_json(bar: MemoryBar) -> dict[str, Any]:
    """The bar as ``plan --json``'s ``ledger``: stable field names, bytes."""
    return {
        "name": bar.name,
        "budget": bar.budget,
        "held": bar.held,
        "roles": [{"role": h.role, "held": h.held, "evictable": h.evictable}
                  for h in bar.holdings],
    }
