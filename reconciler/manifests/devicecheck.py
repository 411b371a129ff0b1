"""Checks of each node's devices against the roles placed on it (PURE; §7.1, §10).

For every node, each role placed on devices must name devices the node
declares (``ids``) or ask for no more than it has (``count``): errors, as
nothing could ever start it there. The always-on roles are then placed on
the node's devices the way the planner would place them (``placement.py``);
what does not fit is a warning on the NodeConfig's ``devices`` (the ledger
refuses it at run time, naming the device).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from reconciler.core.desired import NodeConfig, WantedState
from reconciler.core.devices import index_of, kind_of, shares
from reconciler.core.instances import instance_name
from reconciler.core.units import format_size
from reconciler.core.errors import Problem
from reconciler.manifests.documents import RoleDraft
from reconciler.manifests.yamlsafe import Document
from reconciler.runtimes import spec_of


def check(config: NodeConfig, doc: Document | None, share: Sequence[RoleDraft],
          footprint: Callable[[RoleDraft], int], many: bool,
          memo: dict[object, list[str]] | None = None,
          ) -> tuple[list[Problem], list[Problem]]:
    """Problems and warnings of one node's device placements.

    ``memo``: one dict for the nodes of one check (one ``footprint``): nodes
    with the same devices and the same always-on roles are placed once.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    node = f"node {config.name!r}" if many else "this node"
    declared = ", ".join(d.id for d in config.devices) or "none"
    placeable = []
    have = {d.id for d in config.devices}
    for draft in share:
        req, rt = draft.spec.devices, spec_of(draft.spec.runtime).devices
        if req is None or rt is None:
            continue
        here = ("spec", "placement", "devices")
        missing = [i for i in req.ids if i not in have]
        if missing:
            problems.append(draft.doc.problem(
                here + ("ids",), f"{', '.join(missing)}: not a device of {node} "
                f"(it declares {declared})"))
            continue
        if req.count is not None:
            # A count is of one kind (a server runs on one backend): the most it can
            # have is the largest number of one kind the runtime can use.
            usable = Counter(d.kind for d in config.devices if d.kind in rt.kinds)
            most = max(usable.values(), default=0)
            if req.count > most:
                mixed = len(usable) > 1 and req.count <= sum(usable.values())
                asks = f"asks for {req.count} device{'' if req.count == 1 else 's'}"
                problems.append(draft.doc.problem(
                    here + ("count",), f"{asks}; {node} declares "
                    + (f"at most {most} of one kind it can use ({declared}), and a count "
                       "is of one kind: a server runs on one backend" if mixed
                       else f"{most} it can use ({declared})")))
                continue
        if draft.spec.state is WantedState.RUNNING:
            placeable.append(draft)
    if not placeable or doc is None:
        return problems, warnings
    key = (config.devices, tuple(map(id, placeable)))
    short = memo.get(key) if memo is not None else None
    if short is None:
        short = _unplaced(config, placeable, footprint)
        if memo is not None:
            memo[key] = short
    if short:
        warnings.append(doc.problem(
            ("spec", "devices"), f"the always-on roles placed on {node} do not all fit its "
            f"devices at once: {'; '.join(short)}"))
    return problems, warnings


def _unplaced(config: NodeConfig, drafts: Sequence[RoleDraft],
              footprint: Callable[[RoleDraft], int]) -> list[str]:
    """The always-on roles that find no room, as the planner places claims (fixed ids first).

    The same rule as the planner's device ledger (``planner/placement.py``, a
    later layer): a share per device by the split, best fit for a count.
    """
    free = {d.id: d.memory for d in config.devices}
    out = []
    for draft in sorted(drafts, key=lambda d: (not d.spec.devices.ids, d.spec.serve.port,
                                               d.spec.name)):
        spec = draft.spec
        req, rt = spec.devices, spec_of(spec.runtime).devices
        n = req.wanted
        need = shares(footprint(draft), req.split, n)
        taken: set[str] = set()  # §12 devices of this role's earlier instances
        apart = spec.replicas > 1 and not spec.shared_by_replicas
        for replica in range(spec.replicas):
            if req.ids:
                ids = list(req.ids)
            else:
                ids = _best_fit(config, free, rt.kinds, n, max(need), taken if apart else set())
            if ids and all(free[i] >= b for i, b in zip(ids, need)):
                for i, b in zip(ids, need):
                    free[i] -= b
                taken.update(ids)
                continue
            out.append(f"{instance_name(spec.name, replica)} needs {format_size(max(need))} on "
                       f"{req} ({', '.join(f'{i} {format_size(free[i])} free' for i in sorted(free, key=device_order))})"
                       + (" (instances of a role never share a device)" if taken and apart else ""))
    return out


def _best_fit(config: NodeConfig, free: dict[str, int], kinds: frozenset, n: int,
              most: int, avoid: set[str]) -> list[str]:
    """As the planner's ``pick``: of one kind (kinds in order), the ``n`` devices with the
    least free memory that still hold ``most``, ties by index, none of ``avoid`` (§12 the
    role's other instances); [] when no kind has them."""
    for kind in sorted({d.kind for d in config.devices if d.kind in kinds}):
        fitting = sorted((free[d.id], device_order(d.id), d.id) for d in config.devices
                         if d.kind == kind and free[d.id] >= most and d.id not in avoid)
        if len(fitting) >= n:
            return sorted((i for _, _, i in fitting[:n]), key=device_order)
    return []


def device_order(device_id: str) -> tuple[str, int]:
    return (kind_of(device_id), index_of(device_id))
