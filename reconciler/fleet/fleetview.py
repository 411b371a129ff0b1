"""Every node's offline plan, for review: ``reconcile fleet`` (PURE; BEHAVIOUR §10).

``view(fleet)`` plans each node of the fleet from the manifests alone
(``offline.plan``) and keeps, per node, the roles placed on it with their
port, footprint and what the node would do with them, and the memory its
ledger would hold against its budget. ``text`` and ``as_json`` show it;
``fleetdiff`` compares two views.

Text::

    gpu-1  19.4 GB of 48.0 GB  (pool=a, vram=48)
      devices: cuda:0 9.7 GB/24.0 GB, cuda:1 0 B/24.0 GB
      + coder   llamacpp  :8090  9.7 GB  start
      ! big     llamacpp  :8092  55.0 GB  refuse (unplaceable: …)
      > fetch qwen  4.4 GB
    gpu-2  0 B, no budget
      (no roles)
    not placed on any node: stray
    Fleet: 2 nodes, 2 roles placed, 1 refused, 1 on no node.

JSON (``as_json``, stable field names)::

    {"format": 1,
     "nodes": [{"node", "labels": {str: str}, "memory_budget": int|null,
                "allowed_ports": str|null, "reserved": int,
                "devices": [{"device", "reserved": int, "memory": int}],     # §7.1
                "roles": [{"role", "runtime", "mode", "state", "host", "port",
                           "footprint", "verb", "reason", "status", "detail",
                           "devices": [str]}],
                "fetches": [{"model", "bytes"}]}],   # §1.6 Models to download first
     "unplaced": [str]}
"""

from __future__ import annotations

from typing import Any

import attrs

from reconciler.manifests import fleet as fleets
from reconciler.fleet import offline
from reconciler.core.decisions import Decision, Fetch, NEEDS_OPERATOR, Verb
from reconciler.core.desired import Launch, NodeConfig, RoleSpec
from reconciler.core.instances import group_of
from reconciler.manifests.fleet import Fleet
from reconciler.planner.render import SYMBOLS, reason_text
from reconciler.core.units import format_size

frozen = attrs.frozen(kw_only=True)


@frozen
class RoleView:
    """One role on one node: as the node has it, and what its offline plan does."""

    spec: RoleSpec  # with the node's defaults merged in
    decision: Decision

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def launch(self) -> Launch | None:
        return self.decision.launch


@frozen
class NodeView:
    node: NodeConfig
    roles: tuple[RoleView, ...]  # by name
    fetches: tuple[Fetch, ...] = ()  # §1.6 the Models it must download first

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def reserved(self) -> int:
        """What the node's ledger would hold after its offline plan."""
        return sum(r.decision.reserve for r in self.roles
                   if r.decision.verb in (Verb.START, Verb.LOAD))

    def role(self, name: str) -> RoleView | None:
        return next((r for r in self.roles if r.name == name), None)

    @property
    def devices(self) -> tuple[tuple[str, int, int], ...]:
        """§7.1 (device, reserved after the offline plan, memory) per declared device."""
        held: dict[str, int] = {}
        for r in self.roles:
            if r.decision.verb in (Verb.START, Verb.RESTART):
                for device, size in r.decision.devices:
                    held[device] = held.get(device, 0) + size
        return tuple((d.id, held.get(d.id, 0), d.memory) for d in self.node.devices)


@frozen
class FleetView:
    nodes: tuple[NodeView, ...]  # by name
    unplaced: tuple[str, ...] = ()  # roles on no node

    def node(self, name: str) -> NodeView | None:
        return next((n for n in self.nodes if n.name == name), None)


def view(whole: Fleet, *, implicit: str = "") -> FleetView:
    """Every node's offline plan (``implicit`` names the node of a set without NodeConfig)."""
    nodes = fleets.members(whole, implicit)
    placed = fleets.placements(whole.roles, nodes)
    shares = fleets.by_node(whole.roles, placed, nodes)
    views, merged = [], {}
    for node in nodes:
        desired = fleets.desired_for(whole, node, placed=placed, roles=shares[node.name],
                                     merged=merged)
        the_plan = offline.plan(desired)
        decisions = {d.role: d for d in the_plan.decisions}
        views.append(NodeView(node=node, roles=tuple(
            RoleView(spec=spec, decision=decisions[spec.name]) for spec in desired.roles),
            fetches=the_plan.fetches))
    return FleetView(nodes=tuple(views),
                     unplaced=tuple(name for name, on in placed.items() if not on))


# ---------------------------------------------------------------- showing it


def _what(d: Decision) -> str:
    if d.verb is Verb.KEEP:
        return {"absent": "stopped", "adopted": "adopted (observed only)"}.get(
            str(d.reason), f"keep ({reason_text(d)})")
    if d.acts:
        return str(d.verb)
    return f"{d.verb} ({reason_text(d)})"


def text(fleet_view: FleetView) -> str:
    lines: list[str] = []
    refused = placed = 0
    for node in fleet_view.nodes:
        budget = node.node.memory_budget
        memory = (f"{format_size(node.reserved)} of {format_size(budget)}" if budget is not None
                  else f"{format_size(node.reserved)}, no budget")
        labels = ", ".join(f"{k}={v}" for k, v in node.node.labels)
        lines.append(f"{node.name or '(this node)'}  {memory}" + (f"  ({labels})" if labels else ""))
        if node.node.devices:  # §7.1
            lines.append("  devices: " + ", ".join(
                f"{device} {format_size(held)}/{format_size(total)}"
                for device, held, total in node.devices))
        rows = [(f"{SYMBOLS[r.decision.verb]} {r.name}", str(r.spec.runtime),
                 f":{r.spec.serve.port}", format_size(r.spec.memory.footprint),
                 _what(r.decision)) for r in node.roles]
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(4)]
        for row in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
        if not rows:
            lines.append("  (no roles)")
        lines += [f"  > fetch {f.model}  {format_size(f.bytes)}" for f in node.fetches]
        placed += len(node.roles)
        refused += sum(r.decision.status in NEEDS_OPERATOR for r in node.roles)
    if fleet_view.unplaced:
        lines.append(f"not placed on any node: {', '.join(fleet_view.unplaced)}")
    count = len(fleet_view.nodes)
    # §12 a role with replicas is one role (per node it is placed on) of several instances
    groups = len({(n.name, group_of(r.name)) for n in fleet_view.nodes for r in n.roles})
    tail = [f"{groups} role{'' if groups == 1 else 's'} placed"
            + (f" ({placed} instances)" if placed != groups else "")]
    if refused:
        tail.append(f"{refused} refused")
    if fleet_view.unplaced:
        tail.append(f"{len(fleet_view.unplaced)} on no node")
    lines.append(f"Fleet: {count} node{'' if count == 1 else 's'}, {', '.join(tail)}.")
    return "\n".join(lines) + "\n"


def as_json(fleet_view: FleetView) -> dict[str, Any]:
    return {
        "format": 1,
        "nodes": [_node_json(n) for n in fleet_view.nodes],
        "unplaced": list(fleet_view.unplaced),
    }


def _node_json(node: NodeView) -> dict[str, Any]:
    config = node.node
    return {
        "node": config.name,
        "labels": dict(config.labels),
        "memory_budget": config.memory_budget,
        "allowed_ports": str(config.allowed_ports) if config.allowed_ports else None,
        "reserved": node.reserved,
        "devices": [{"device": device, "reserved": held, "memory": total}
                    for device, held, total in node.devices],
        "roles": [_role_json(r) for r in node.roles],
        "fetches": [{"model": f.model, "bytes": f.bytes} for f in node.fetches],
    }


def _role_json(role: RoleView) -> dict[str, Any]:
    spec, d = role.spec, role.decision
    return {
        "role": spec.name, "runtime": str(spec.runtime), "mode": str(spec.mode),
        "state": str(spec.state), "host": spec.serve.host, "port": spec.serve.port,
        "footprint": spec.memory.footprint, "verb": str(d.verb), "reason": str(d.reason),
        "status": str(d.status), "detail": d.detail,
        "devices": [device for device, _ in d.devices],
    }
