"""NodeConfig ``devices`` and ``spec.placement.devices`` from a schema-valid document (PURE; §7.1).

``documents.py`` calls these with its reader (``get``, ``size``, ``add``):
parsing, and the per-document rules a schema cannot state (ids unique, a
kind that agrees with its id, one split weight per device, one kind per
role, a runtime that takes devices). Checks against a node's declared
devices are ``devicecheck.py``'s.
"""

from __future__ import annotations

from reconciler.core.desired import Mode, Runtime
from reconciler.core.devices import Device, DeviceKind, DeviceRequest, index_of, kind_of
from reconciler.runtimes import spec_of


def node_devices(r) -> tuple[Device, ...]:
    """NodeConfig ``devices`` (§7.1): ids unique, a kind that agrees with its id."""
    out: list[Device] = []
    seen: set[tuple[str, int]] = set()
    for i, raw in enumerate(r.get("spec", "devices") or ()):
        here = ("spec", "devices", i)
        device_id = str(raw["id"])
        kind = kind_of(device_id)
        if raw.get("kind") is not None and raw["kind"] != kind:
            r.add(here + ("kind",), f"{raw['kind']!r} does not match the id {device_id!r} "
                  f"(a {kind} device)")
        # One id per device: the schema admits one spelling of an index (no leading
        # zeros), and a device is its kind and index, so no two entries name one device.
        device = (kind, index_of(device_id))
        if device in seen:
            r.add(here + ("id",), f"{device_id} is declared twice")
        seen.add(device)
        memory = r.size("spec", "devices", i, "memory", value=raw.get("memory"))
        if memory == 0:
            r.add(here + ("memory",), "must be more than 0 bytes")
        out.append(Device(id=device_id, kind=DeviceKind(kind), memory=memory or 0))
    return tuple(sorted(out, key=lambda d: (d.kind, d.index)))


def role_devices(r, runtime: Runtime, mode: Mode) -> DeviceRequest | None:
    """``spec.placement.devices`` (§7.1), and the rules a schema cannot state."""
    raw = r.get("spec", "placement", "devices")
    if raw is None:
        return None
    here = ("spec", "placement", "devices")
    launch = spec_of(runtime).devices
    if launch is None:
        r.add(here, f"{runtime} roles claim host memory only: the reconciler does not launch "
              f"{spec_of(runtime).title}, which places models on its own devices")
    elif mode is not Mode.MANAGED:
        r.add(here, "placement.devices needs mode: managed (an adopted server is never launched)")
    ids = tuple(raw.get("ids") or ())
    count = raw.get("count")
    split = tuple(float(w) for w in raw.get("split") or ())
    n = len(ids) if ids else int(count or 0)
    if split and len(split) != n:
        r.add(here + ("split",), f"has {len(split)} weights for {n} device"
              f"{'' if n == 1 else 's'}: give one per device")
    if len({kind_of(i) for i in ids}) > 1:
        r.add(here + ("ids",), "must all be of one kind (a server runs on one backend)")
    if launch is not None:
        for i in ids:
            if kind_of(i) not in launch.kinds:
                r.add(here + ("ids",), f"{i}: {runtime} runs on "
                      f"{' or '.join(sorted(launch.kinds))} devices only")
    return DeviceRequest(count=None if ids else int(count or 0), ids=ids, split=split)
