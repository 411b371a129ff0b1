"""``reconcile capabilities``' devices: found against declared, and ``--devices-yaml`` (SHELL; §7.1).

Discovery (``world/devices.py``) says what this machine has; the node's
NodeConfig says what the planner may use. Each device is ``ok``, ``missing``
or ``smaller`` (the roles placed on it are refused), or ``undeclared`` (a
note); ``unchecked`` when no discovery tool answered (the declaration is
trusted). ``--devices-yaml`` prints a NodeConfig snippet for what was found.
"""

from __future__ import annotations

from reconciler.core.desired import NodeConfig
from reconciler.core.devices import compare, devices_yaml
from reconciler.core.units import format_size


def report(node: NodeConfig) -> dict:
    from reconciler.world import devices

    found = devices.discover()
    if found.tool is None:
        # Nothing to compare with: the declaration is trusted, as a pass trusts it.
        rows = [{"device": d.id, "state": "unchecked", "declared": d.memory, "found": None,
                 "why": "no discovery tool answered"} for d in node.devices]
    else:
        rows = [{"device": c.id, "state": c.state, "declared": c.declared, "found": c.found,
                 "why": c.why} for c in compare(node.devices, found.devices)]
    return {"tool": found.tool, "notes": list(found.notes), "devices": rows,
            "found": [{"device": d.id, "kind": str(d.kind), "name": d.name, "memory": d.memory,
                       "used": d.used} for d in found.devices],
            "yaml": devices_yaml(found.devices)}


def print_text(rep: dict) -> None:
    print()
    tool = rep["tool"] or "no tool found devices"
    print(f"DEVICES ({tool})")
    if not rep["devices"]:
        print("  none declared, none found" + (f" ({'; '.join(rep['notes'])})" if rep["notes"] else ""))
        return
    for row in rep["devices"]:
        declared = format_size(row["declared"]) if row["declared"] is not None else "-"
        found = format_size(row["found"]) if row["found"] is not None else "-"
        why = f": {row['why']}" if row["why"] else ""
        print(f"  {row['device']:<10} declared {declared:<9} found {found:<9} {row['state']}{why}")


def failed(rep: dict) -> bool:
    return any(r["state"] in ("missing", "smaller") for r in rep["devices"])
