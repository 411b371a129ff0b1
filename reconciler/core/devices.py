"""Value types of accelerator devices (PURE): declared, requested, assigned, found.

A node declares its devices in NodeConfig ``devices`` (``Device``: an id like
``cuda:0``, a kind, the memory the reconciler may plan onto it); a role asks
for some in ``spec.placement.devices`` (``DeviceRequest``: a count or ids, and
an optional split); the planner answers with an ``Assignment``: which devices,
and how many bytes on each. Discovery (``world/gpuparse.py``) reports the
devices a machine has as ``FoundDevice`` values.
"""

from __future__ import annotations

import enum
import functools
import math

import attrs

frozen = attrs.frozen(kw_only=True)


class DeviceKind(enum.StrEnum):
    CUDA = "cuda"
    ROCM = "rocm"
    METAL = "metal"
    VULKAN = "vulkan"


@frozen
class Device:
    """One declared device of a node: ``id`` is ``<kind>:<index>``; memory in bytes."""

    id: str
    kind: DeviceKind
    memory: int

    @property
    def index(self) -> int:
        return index_of(self.id)


@functools.lru_cache(maxsize=4096)
def index_of(device_id: str) -> int:
    """The index in ``cuda:1`` (what the visibility variable names)."""
    return int(device_id.rpartition(":")[2])


def kind_of(device_id: str) -> str:
    return device_id.partition(":")[0]


@frozen
class DeviceRequest:
    """``spec.placement.devices``: ``count`` devices of one kind, or exactly ``ids``.

    ``split``: proportions of the footprint per device, in device order (an
    empty tuple: even). The footprint (weights + kv) is divided by it.
    """

    count: int | None = None
    ids: tuple[str, ...] = ()
    split: tuple[float, ...] = ()

    @property
    def wanted(self) -> int:
        return len(self.ids) if self.ids else (self.count or 0)

    def __str__(self) -> str:
        return ", ".join(self.ids) if self.ids else f"{self.count} device" + (
            "" if self.count == 1 else "s")


@functools.lru_cache(maxsize=4096)
def shares(total: int, split: tuple[float, ...], n: int) -> tuple[int, ...]:
    """``total`` bytes cut into ``n`` shares by ``split`` (even when empty); they sum to ``total``.

    Each share is rounded up except the last, which takes the rest: what is
    reserved is never less than the footprint.
    """
    weights = split if split else (1.0,) * n
    whole = sum(weights)
    out = [math.ceil(total * w / whole) for w in weights[:-1]]
    out.append(max(total - sum(out), 0))
    return tuple(out)


@frozen
class Assignment:
    """Which devices a role runs on, and the bytes it reserves on each (device order)."""

    ids: tuple[str, ...] = ()
    bytes: tuple[int, ...] = ()
    split: tuple[float, ...] = ()  # as requested (for --tensor-split); empty: even
    # (device, bytes), worked out once: the planner reads it several times per claim per pass.
    _pairs: tuple[tuple[str, int], ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_pairs", tuple(zip(self.ids, self.bytes)))

    def __bool__(self) -> bool:
        return bool(self.ids)

    def pairs(self) -> tuple[tuple[str, int], ...]:
        return self._pairs

    def __str__(self) -> str:
        return ", ".join(self.ids)


@frozen
class FoundDevice:
    """A device discovery found on this machine (bytes; ``used``: None when unknown)."""

    id: str
    kind: DeviceKind
    name: str
    memory: int
    used: int | None = None
    uuid: str = ""
    pci_bus: str = ""


@frozen
class DeviceUse:
    """Memory a process uses on a device, as NVML or nvidia-smi report it."""

    pid: int
    device: str  # the device id (``cuda:0``)
    used: int  # bytes


@frozen
class Compared:
    """One device, declared or found or both: ``state`` ok | missing | smaller | undeclared."""

    id: str
    state: str
    declared: int | None
    found: int | None
    why: str = ""


def found_state(declared: Device, found: FoundDevice | None) -> str:
    """§7.1 one declared device as discovery found it: ``missing``, ``smaller`` or ``ok``.

    The one rule ``capabilities`` and the planner both read: only a device found
    missing, or found with less memory than declared, takes no claim. A size the
    tool does not report (``[N/A]``: read as 0, unknown) is not smaller: the
    declaration is trusted, as when no tool answers at all.
    """
    if found is None:
        return "missing"
    return "smaller" if 0 < found.memory < declared.memory else "ok"


def compare(declared: tuple[Device, ...], found: tuple[FoundDevice, ...]) -> tuple[Compared, ...]:
    """Declared devices against found ones (§7.1, ``found_state``), in device order.

    Missing or smaller: the roles placed on it are refused (the planner reads
    the same facts); undeclared: a note (the planner never uses it).
    """
    seen = {f.id: f for f in found}
    out = []
    for d in declared:
        f = seen.pop(d.id, None)
        state = found_state(d, f)
        if f is None:
            out.append(Compared(id=d.id, state=state, declared=d.memory, found=None,
                                why="declared, not found: roles placed on it are unplaceable"))
        elif state == "smaller":
            out.append(Compared(id=d.id, state=state, declared=d.memory, found=f.memory,
                                why="declared larger than found: roles placed on it are unplaceable"))
        elif not f.memory:
            out.append(Compared(id=d.id, state=state, declared=d.memory, found=None,
                                why="found; the tool reports no memory size: the declaration "
                                    "is trusted"))
        else:
            out.append(Compared(id=d.id, state=state, declared=d.memory, found=f.memory))
    out += [Compared(id=f.id, state="undeclared", declared=None, found=f.memory,
                     why="found, not declared in NodeConfig devices: never planned onto")
            for f in seen.values()]
    return tuple(sorted(out, key=lambda c: (c.id.partition(":")[0], index_of(c.id))))


def devices_yaml(found: tuple[FoundDevice, ...], headroom: float = 0.9) -> str:
    """A NodeConfig ``devices:`` snippet for what was found (memory less room for the driver).

    A device whose size the tool does not report is written as a comment: its
    memory is for the operator to declare (0 bytes would not validate).
    """
    known = [f for f in found if f.memory]
    lines = ["devices:" if known else "devices: []"]
    for f in found:
        if not f.memory:
            lines.append(f"  # - {{id: \"{f.id}\", kind: {f.kind}, memory: ...}}  # {f.name}: "
                         "the tool reports no memory size; declare what may be planned onto it")
            continue
        plan = int(f.memory * headroom) // 10**8 * 10**8  # rounded down to 0.1 GB
        lines.append(f"  - {{id: \"{f.id}\", kind: {f.kind}, memory: {plan / 1e9:.1f}GB}}"
                     f"  # {f.name}, {f.memory / 2**30:.1f} GiB")
    return "\n".join(lines) + "\n"
