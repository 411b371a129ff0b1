"""The device ledger: bytes held per device, and which devices a claim gets (PURE; BEHAVIOUR §7.1).

A node declares its devices (NodeConfig ``devices``); a role placed on
devices (``spec.placement.devices``) divides its footprint (weights + kv)
over them by its split. ``ledger.place`` keeps one ``DeviceLedger`` beside
the host ledger for the pass:

* every holder's devices are counted first (a running role holds the devices
  of its launch, as recorded: it is never moved to make room);
* a claim's devices are picked by ``pick``: exactly ``ids``; or, for
  ``count``, the devices the role last ran on when they still fit (a restart
  stays put), else a deterministic best fit: the devices of one kind with
  the least free memory that still holds a share, ties by id;
* a claim that fits no device is refused with the device, its free memory
  and its holders (``refusal``).

No device is ever planned over its declared memory; a declared device that
discovery found missing or smaller takes no claim (``unusable``).
Each operation costs O(devices of the node): linear in the roles.

Size: the device ledger (its picks and refusals) beside what reads it back
(observed use over the reservation, the table ``status`` and the metrics show):
one vocabulary of devices and bytes, kept together.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import attrs

from reconciler.core.decisions import Decision, Reason, Status, Verb
from reconciler.core.desired import RoleSpec
from reconciler.core.devices import (
    Assignment,
    Device,
    DeviceKind,
    DeviceRequest,
    DeviceUse,
    FoundDevice,
    found_state,
    index_of,
    kind_of,
    shares,
)
from reconciler.core.observed import RoleRecord
from reconciler.core.units import format_size
from reconciler.runtimes import spec_of

Pairs = tuple[tuple[str, int], ...]


@attrs.frozen(kw_only=True)
class Claim:
    """What a start or restart asks of the devices."""

    request: DeviceRequest
    footprint: int
    kinds: frozenset[DeviceKind]
    prefer: tuple[str, ...] = ()  # the devices it ran on (a count request stays on them)
    # Worked out once per claim (a claim is kept with its role's launch, launches.py), not
    # once per pick: the bytes on each device it gets (device order), and the largest share.
    need: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)
    most: int = attrs.field(init=False, eq=False, repr=False)
    _on: dict[tuple[str, ...], Assignment] = attrs.field(init=False, eq=False, repr=False,
                                                        factory=dict)

    def __attrs_post_init__(self) -> None:
        need = shares(self.footprint, self.request.split, self.request.wanted)
        object.__setattr__(self, "need", need)
        object.__setattr__(self, "most", max(need) if need else 0)

    def on(self, ids: tuple[str, ...]) -> Assignment:
        """The claim's assignment to ``ids`` (one value per set of devices, kept)."""
        got = self._on.get(ids)
        if got is None:
            if len(self._on) >= 64:  # a count claim meets at most the node's devices
                self._on.clear()
            got = self._on[ids] = Assignment(ids=ids, bytes=self.need, split=self.request.split)
        return got


def device_order(device_id: str) -> tuple[str, int]:
    return (kind_of(device_id), index_of(device_id))


def preferred(spec: RoleSpec, record: RoleRecord | None,
              node: Mapping[str, Device]) -> Assignment | None:
    """The devices a role's launch is built with before placement, or None.

    ``ids`` are fixed; a ``count`` role keeps the devices of its last launch
    while they still answer the request (so a role in sync is not "changed").
    None: host-only, or a count role with no usable devices yet (placement picks).
    """
    req, rt = spec.devices, spec_of(spec.runtime).devices
    if req is None or rt is None:
        return None
    if req.ids:
        ids = req.ids
    else:
        ids = tuple(i for i, _ in record.devices) if record is not None else ()
        found = [node.get(i) for i in ids]
        if (len(ids) != req.count or any(d is None or d.kind not in rt.kinds for d in found)
                or len({d.kind for d in found if d is not None}) != 1):
            return None
    return Assignment(ids=ids, bytes=shares(spec.memory.footprint, req.split, len(ids)),
                      split=req.split)


def claim_of(spec: RoleSpec, prefer: Assignment | None) -> Claim | None:
    req, rt = spec.devices, spec_of(spec.runtime).devices
    if req is None or rt is None:
        return None
    return Claim(request=req, footprint=spec.memory.footprint, kinds=rt.kinds,
                 prefer=prefer.ids if prefer else ())


def unusable(devices: Sequence[Device], found: Iterable[FoundDevice] | None) -> dict[str, str]:
    """Declared devices discovery found missing or smaller than declared → why.

    ``found_state``'s rule, as ``capabilities`` reads it: a device whose size the
    tool does not report is not smaller, and takes claims as declared.
    """
    if found is None:
        return {}
    seen = {f.id: f for f in found}
    out = {}
    for d in devices:
        f = seen.get(d.id)
        state = found_state(d, f)
        if f is None:
            out[d.id] = f"{d.id} is declared but not found on this machine"
        elif state == "smaller":
            out[d.id] = (f"{d.id} is declared with {format_size(d.memory)} but has "
                         f"{format_size(f.memory)}")
    return out


class DeviceLedger:
    """Bytes held per device and per role for one ``place()`` call."""

    def __init__(self, devices: Sequence[Device], broken: Mapping[str, str] | None = None,
                 apart: Mapping[str, str] | None = None) -> None:
        self.capacity, self.kinds, self.order, self.rank, self.by_kind = _declared(devices)
        self.broken = dict(broken or {})
        #: §12 instance → its group, for groups whose instances never share a device.
        self.apart: Mapping[str, str] = apart or {}
        self.used: dict[str, int] = dict.fromkeys(self.capacity, 0)
        self.held: dict[str, Pairs] = {}
        self.holders: dict[str, dict[str, int]] = {d: {} for d in self.capacity}

    def hold(self, name: str, pairs: Pairs) -> bool:
        """``name`` holds ``pairs`` now (replacing what it held); True when anything shrank."""
        replaced = name in self.held and self.release(name)  # a replaced hold may be smaller
        for device, size in pairs:
            self.used[device] = self.used.get(device, 0) + size
            self.holders.setdefault(device, {})[name] = size
        self.held[name] = pairs
        return replaced

    def release(self, name: str) -> bool:
        pairs = self.held.pop(name, None)
        if pairs is None:
            return False
        for device, size in pairs:
            self.used[device] -= size
            self.holders[device].pop(name, None)
        return True

    def free(self, device: str, name: str) -> int:
        """Free bytes on ``device`` if ``name`` gave up what it holds there."""
        own = self.holders[device].get(name, 0) if device in self.holders else 0
        return self.capacity.get(device, 0) - self.used.get(device, 0) + own

    def pick(self, name: str, claim: Claim) -> Assignment | None:
        """The devices ``claim`` gets (best fit, deterministic), or None when none fit."""
        req = claim.request
        if req.ids:
            return claim.on(req.ids) if self._fits_on(name, claim, req.ids) else None
        count = req.count or 0
        prefer = claim.prefer
        if len(prefer) == count and self._fits_on(name, claim, prefer):
            return claim.on(prefer)
        for kind, ids in self.by_kind:  # the kinds the node declares, in kind order
            if kind not in claim.kinds:
                continue
            if count == 1:  # the common case: the fullest device that still fits
                found = self._fullest(name, ids, claim.most)
                if found is not None:
                    return claim.on((found,))
                continue
            fitting = [d for d in ids
                       if self._usable(d, claim) and self.free(d, name) >= claim.most
                       and (not self.apart or self.sibling(d, name) is None)]
            if len(fitting) >= count:
                best = sorted(fitting, key=lambda d: (self.free(d, name), self.rank[d]))[:count]
                return claim.on(tuple(sorted(best, key=self.rank.__getitem__)))
        return None

    def _fits_on(self, name: str, claim: Claim, ids: tuple[str, ...]) -> bool:
        """Does every device of ``ids`` take its share of ``claim`` (in order)?"""
        for device, need in zip(ids, claim.need):
            if not self._usable(device, claim) or self.free(device, name) < need:
                return False
            if self.apart and self.sibling(device, name) is not None:
                return False
        return True

    def sibling(self, device: str, name: str) -> str | None:
        """§12 another instance of ``name``'s group holding ``device`` (the first by name),
        when the group's instances may not share one; else None."""
        group = self.apart.get(name)
        if group is None:
            return None
        apart = self.apart
        found = [who for who in self.holders.get(device, ()) if who != name
                 and apart.get(who) == group]
        return min(found) if found else None

    def _fullest(self, name: str, ids: tuple[str, ...], need: int) -> str | None:
        """The device of ``ids`` (declared, of one kind the claim can use, in device order)
        that is not broken and has the least free memory that still holds ``need`` (ties:
        the first), or None. One pass, each device's free memory worked out once: this runs
        for every count-1 claim."""
        best, least = None, 0
        broken, capacity, used, holders = self.broken, self.capacity, self.used, self.holders
        apart = self.apart and name in self.apart  # §12 instances of one group never share
        for device in ids:  # device order: a tie keeps the first
            if device in broken or (apart and self.sibling(device, name) is not None):
                continue
            free = capacity[device] - used[device] + holders[device].get(name, 0)
            if free >= need and (best is None or free < least):
                best, least = device, free
        return best

    def _usable(self, device: str, claim: Claim) -> bool:
        return (device in self.capacity and device not in self.broken
                and self.kinds[device] in claim.kinds)

    def refusal(self, name: str, claim: Claim) -> str:
        """Why ``claim`` fits no devices: each device it could use, its free memory, its holders."""
        req = claim.request
        if req.ids:
            need = shares(claim.footprint, req.split, len(req.ids))
            for device, n in zip(req.ids, need):
                if device not in self.capacity:
                    return f"{device} is not a device of this node"
                if device in self.broken:
                    return self.broken[device]
                if self.kinds[device] not in claim.kinds:
                    return f"{device} is a {self.kinds[device]} device; this runtime cannot use it"
                if self.free(device, name) < n:
                    return self._short(device, name, n)
                if self.sibling(device, name) is not None:
                    return self._taken(device, name)
            raise AssertionError(f"{name} fits {req.ids}")
        count = req.count or 0
        need = shares(claim.footprint, req.split, count)
        most = max(need) if need else 0
        usable = [d for d in self.order if d in self.capacity and self.kinds[d] in claim.kinds]
        if len(usable) < count:
            return (f"{name} needs {count} device{'s' if count != 1 else ''} of "
                    f"{' or '.join(sorted(claim.kinds))}; the node declares {len(usable)}")
        parts = [self.broken[d] if d in self.broken else self._taken(d, name)
                 if self.sibling(d, name) is not None else self._short(d, name, most, said=False)
                 for d in usable]
        each = f"{format_size(most)} on each of {count} devices" if count > 1 else format_size(most)
        return f"{name} needs {each}: " + "; ".join(parts)

    def _taken(self, device: str, name: str) -> str:
        """§12 ``device`` holds another instance of ``name``'s group."""
        return (f"{device} holds {self.sibling(device, name)} (instances of "
                f"{self.apart[name]} never share a device)")

    def _short(self, device: str, name: str, need: int, said: bool = True) -> str:
        free = max(self.free(device, name), 0)
        others = sorted((who, size) for who, size in self.holders.get(device, {}).items()
                        if who != name and size > 0)
        if said:
            held = (", ".join(f"{who} ({format_size(size)})" for who, size in others)
                    if others else "nothing else")
            return (f"{device} has {format_size(free)} free, {name} needs {format_size(need)}; "
                    f"held by {held}")
        held = (", ".join(f"{who} {format_size(size)}" for who, size in others)
                if others else "nothing else")
        return f"{device} has {format_size(free)} free (held by {held})"

    def summary(self) -> dict[str, tuple[int, int]]:
        """device → (reserved, capacity)."""
        return {d: (self.used[d], self.capacity[d]) for d in self.order}


#: Nodes whose declared devices are remembered at once (``reconcile fleet`` plans every node
#: of a fleet in one process: a bound below the fleet's size empties the table every pass;
#: ``launches.NODES`` is this bound too).
NODES = 4096
_DECLARED: dict[int, tuple[Sequence[Device], tuple]] = {}  # id → (the devices, their tables)


def _declared(devices: Sequence[Device]) -> tuple[
        Mapping[str, int], Mapping[str, DeviceKind], tuple[str, ...], Mapping[str, int],
        tuple[tuple[DeviceKind, tuple[str, ...]], ...]]:
    """capacity, kind, order, rank, and each declared kind's ids (read-only), worked out
    once per declaration: found by identity, the node's own tuple pass after pass."""
    same = _DECLARED.get(id(devices))
    if same is not None and same[0] is devices:
        return same[1]
    capacity = {d.id: d.memory for d in devices}
    kinds = {d.id: d.kind for d in devices}
    order = tuple(sorted(capacity, key=device_order))
    by_kind = tuple((kind, tuple(d for d in order if kinds[d] == kind))
                    for kind in sorted(set(kinds.values())))
    tables = (MappingProxyType(capacity), MappingProxyType(kinds), order,
              MappingProxyType({d: i for i, d in enumerate(order)}), by_kind)
    if len(_DECLARED) >= NODES:
        _DECLARED.clear()
    _DECLARED[id(devices)] = (devices, tables)  # keeps the tuple: its id stays its own
    return tables


def over_reserved(d: Decision, uses: Mapping[int, Mapping[str, int]]) -> Decision:
    """§7.1 a running server using more on a device than it reserved there is ``degraded``.

    ``uses``: pid → device → bytes, as NVML or nvidia-smi report them. Only a
    server in sync is judged (one starting or restarting has no steady use).
    """
    if d.verb is not Verb.KEEP or d.status is not Status.RUNNING or not d.devices or d.pid is None:
        return d
    used = uses.get(d.pid)
    if not used:
        return d
    over = [(device, used[device], size) for device, size in d.devices
            if used.get(device, 0) > size]
    if not over:
        return d
    detail = "; ".join(f"using {format_size(u)} on {device}, reserved {format_size(size)}"
                       for device, u, size in over)
    return attrs.evolve(d, reason=Reason.OVER_RESERVED, status=Status.DEGRADED, detail=detail,
                        why=f"over its reservation on {', '.join(dev for dev, _, _ in over)}")


def uses_by_pid(uses: Iterable[DeviceUse]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for use in uses:
        mine = out.setdefault(use.pid, {})
        mine[use.device] = mine.get(use.device, 0) + use.used
    return out


def held_after(d: Decision) -> Pairs:
    """(device, bytes) the role holds once ``d`` is done: kept, started or restarted (§7.1)."""
    return () if d.verb in (Verb.STOP, Verb.REFUSE, Verb.FORGET, Verb.GIVE_UP) else d.devices


def device_table(node: NodeConfig, decisions: Iterable[Decision],
                 uses: Mapping[int, Mapping[str, int]]) -> list[dict]:
    """Per declared device: its memory, and each holder's reserved and used bytes (status, metrics)."""
    rows = []
    for device in sorted(node.devices, key=lambda d: device_order(d.id)):
        holders = []
        for d in sorted(decisions, key=lambda d: d.role):
            size = dict(held_after(d)).get(device.id)
            if size is None:
                continue
            used = uses.get(d.pid, {}).get(device.id) if d.pid is not None else None
            holders.append({"role": d.role, "reserved": size, "used": used})
        rows.append({"device": device.id, "kind": str(device.kind), "memory": device.memory,
                     "reserved": sum(h["reserved"] for h in holders), "holders": holders})
    return rows
