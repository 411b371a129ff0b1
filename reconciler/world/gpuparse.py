"""PURE readers of GPU tools' output: the devices a machine has, the memory each process uses.

Text in, ``FoundDevice`` / ``DeviceUse`` values out; ``world/devices.py`` runs
the tools (through ``system/programs.py``) or asks NVML and hands the text or
numbers here. Each reader is tested on real outputs recorded from real
machines (``tests/devices/data/``, sources in its SOURCES.md).

Device ids: ``cuda:N`` is nvidia-smi's index N (PCI bus order; the launch sets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA counts the same way), ``rocm:N`` is
rocm-smi's ``cardN``, ``metal:0`` is an Apple silicon GPU on unified memory.
"""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET

from reconciler.core.devices import DeviceKind, DeviceUse, FoundDevice

_MIB = 2**20
_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6,
          "gb": 10**9, "tb": 10**12}


def _mib(text: str | None) -> int | None:
    """``24564 MiB`` (or a bare number of MiB, as ``nounits`` prints) → bytes; None: N/A."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if m is None:
        return None
    unit = m.group(2).lower() or "mib"
    return int(float(m.group(1)) * _UNITS.get(unit, _MIB))


# ---------------------------------------------------------------- nvidia-smi -q -x


def nvidia_smi_xml(text: str) -> tuple[tuple[FoundDevice, ...], tuple[DeviceUse, ...]]:
    """``nvidia-smi -q -x``: every GPU (in its order: the index) and the processes on each."""
    root = ET.fromstring(text)
    devices, uses = [], []
    for index, gpu in enumerate(root.findall("gpu")):
        device_id = f"cuda:{index}"
        fb = gpu.find("fb_memory_usage")
        total = _mib(fb.findtext("total")) if fb is not None else None
        used = _mib(fb.findtext("used")) if fb is not None else None
        devices.append(FoundDevice(
            id=device_id, kind=DeviceKind.CUDA, name=(gpu.findtext("product_name") or "").strip(),
            memory=total or 0, used=used, uuid=(gpu.findtext("uuid") or "").strip(),
            pci_bus=gpu.get("id", "")))
        for proc in gpu.iter("process_info"):
            pid, size = proc.findtext("pid"), _mib(proc.findtext("used_memory"))
            if pid and pid.strip().isdigit() and size is not None:
                uses.append(DeviceUse(pid=int(pid), device=device_id, used=size))
    return tuple(devices), tuple(uses)


# ---------------------------------------------------------------- nvidia-smi CSV

#: The query ``world/devices.py`` asks (any order and extra columns are read too).
QUERY_GPU = "index,uuid,name,memory.total,memory.used,pci.bus_id"
QUERY_APPS = "gpu_uuid,pid,used_gpu_memory"


def _rows(text: str) -> list[dict[str, str]]:
    """CSV rows keyed by the header's field names (``memory.total [MiB]`` → ``memory.total``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    reader = csv.reader(lines, skipinitialspace=True)
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in next(reader)]
    return [dict(zip(header, (c.strip() for c in row))) for row in reader]


def nvidia_smi_csv(text: str) -> tuple[FoundDevice, ...]:
    """``nvidia-smi --query-gpu=index,uuid,name,memory.total,… --format=csv``.

    Without an ``index`` column the rows' order is the index. A GPU without
    ``memory.total`` (or with N/A) is reported with memory 0 (unknown).
    """
    out = []
    for position, row in enumerate(_rows(text)):
        index = row.get("index")
        number = int(index) if index is not None and index.isdigit() else position
        out.append(FoundDevice(
            id=f"cuda:{number}", kind=DeviceKind.CUDA, name=row.get("name", ""),
            memory=_mib(row.get("memory.total")) or 0, used=_mib(row.get("memory.used")),
            uuid=row.get("uuid", ""), pci_bus=row.get("pci.bus_id", "")))
    return tuple(out)


def nvidia_smi_apps_csv(text: str, devices: tuple[FoundDevice, ...]) -> tuple[DeviceUse, ...]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_gpu_memory --format=csv``.

    Rows name a GPU by uuid (or bus id); ``devices`` says which id that is.
    A row of a GPU not among them is left out.
    """
    by_key = {d.uuid: d.id for d in devices if d.uuid}
    by_key.update({d.pci_bus: d.id for d in devices if d.pci_bus})
    out = []
    for row in _rows(text):
        device = by_key.get(row.get("gpu_uuid", "")) or by_key.get(row.get("gpu_bus_id", ""))
        pid, size = row.get("pid", ""), _mib(row.get("used_gpu_memory"))
        if device is not None and pid.isdigit() and size is not None:
            out.append(DeviceUse(pid=int(pid), device=device, used=size))
    return tuple(out)


def split_blocks(text: str) -> list[str]:
    """Several CSV outputs pasted one after another → one text per header.

    A header's first field is a field name; a row's starts with a digit (an
    index) or ``GPU-`` (a uuid): the queries ``world/devices.py`` asks.
    """
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        first = line.split(",")[0].strip()
        if not blocks or not (first[:1].isdigit() or first.startswith("GPU-")):
            blocks.append([])
        blocks[-1].append(line)
    return ["\n".join(b) for b in blocks]


# ---------------------------------------------------------------- AMD


def rocm_smi_json(text: str) -> tuple[FoundDevice, ...]:
    """``rocm-smi --showmeminfo vram --showproductname --json``: ``cardN`` → ``rocm:N``."""
    data = json.loads(text)
    out = []
    for key, card in sorted(data.items(), key=lambda kv: _card_number(kv[0])):
        number = _card_number(key)
        if number < 0 or not isinstance(card, dict):
            continue  # "system" and friends
        total = card.get("VRAM Total Memory (B)")
        used = card.get("VRAM Total Used Memory (B)")
        name = card.get("Card Series") or card.get("Device Name") or card.get("Card series") or ""
        out.append(FoundDevice(
            id=f"rocm:{number}", kind=DeviceKind.ROCM, name=str(name),
            memory=int(total) if str(total or "").isdigit() else 0,
            used=int(used) if str(used or "").isdigit() else None,
            uuid=str(card.get("Unique ID") or card.get("GUID") or ""),
            pci_bus=str(card.get("PCI Bus") or "")))
    return tuple(out)


def _card_number(key: str) -> int:
    m = re.fullmatch(r"card(\d+)", key)
    return int(m.group(1)) if m else -1


# ---------------------------------------------------------------- Apple


def system_profiler(displays: str, hardware: str, *,
                    wired_limit_mb: int | None = None) -> tuple[FoundDevice, ...]:
    """``system_profiler -json SPDisplaysDataType`` + ``SPHardwareDataType``: ``metal:0``.

    Apple silicon has unified memory, but the GPU may wire only its working
    set, not the whole machine (``metal_working_set``: ``iogpu.wired_limit_mb``
    when set, else macOS's default share of ``physical_memory``).
    A Mac without an Apple GPU (no ``sppci_cores`` / ``Apple`` chip) has none.
    """
    gpus = json.loads(displays).get("SPDisplaysDataType") or []
    hw = (json.loads(hardware).get("SPHardwareDataType") or [{}])[0]
    memory = metal_working_set(_size_words(str(hw.get("physical_memory", ""))), wired_limit_mb)
    out = []
    for gpu in gpus:
        name = str(gpu.get("sppci_model") or gpu.get("_name") or "")
        if "Apple" not in name and "AppleM" not in name and not gpu.get("sppci_cores"):
            continue
        out.append(FoundDevice(id=f"metal:{len(out)}", kind=DeviceKind.METAL,
                               name=name.replace("kHW_AppleM1Item", "Apple M1"), memory=memory))
    return tuple(out)


#: Up to this much unified memory macOS's default GPU working set is two thirds of it, above
#: it three quarters (BEHAVIOUR §7.1; the figures it rests on are in tests/devices/data/SOURCES.md).
SMALL_MAC = 36 * 2**30


def metal_working_set(physical: int, wired_limit_mb: int | None) -> int:
    """What the GPU of an Apple silicon Mac with ``physical`` bytes may use (§7.1).

    ``iogpu.wired_limit_mb`` when it is set (non-zero: the operator raised or
    lowered the GPU's wired limit, and Metal's ``recommendedMaxWorkingSetSize``
    follows it), never more than the machine; else the default macOS applies,
    which Apple does not publish: two thirds of memory up to ``SMALL_MAC``,
    three quarters above, as Metal reported it on macOS 13/14 (newer macOS gives
    somewhat more, so this under-promises there, never over). 0 stays 0 (unknown).
    """
    if physical <= 0:
        return 0
    if wired_limit_mb:
        return min(wired_limit_mb * 2**20, physical)
    return physical * 2 // 3 if physical <= SMALL_MAC else physical * 3 // 4


def _size_words(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GB|TB|MB)\s*", text)
    if m is None:
        return 0
    # system_profiler's "128 GB" is binary (the machine's 128 GiB).
    return int(float(m.group(1)) * {"MB": 2**20, "GB": 2**30, "TB": 2**40}[m.group(2)])


def sysctl_memsize(text: str) -> int | None:
    """``hw.memsize: 7516192768`` from ``sysctl hw.memsize`` (or the bare number of ``-n``)."""
    return _sysctl_number(text, "hw.memsize")


def sysctl_wired_limit_mb(text: str) -> int | None:
    """``iogpu.wired_limit_mb: 0`` from ``sysctl iogpu.wired_limit_mb`` (or ``-n``'s bare number).

    A write's echo ``iogpu.wired_limit_mb: 0 -> 14000`` is read as the value
    now (14000). None: not there (an Intel Mac, an older macOS: ``unknown oid``).
    """
    return _sysctl_number(text, "iogpu.wired_limit_mb")


def _sysctl_number(text: str, name: str) -> int | None:
    m = re.search(rf"^{re.escape(name)}:\s*(\d+)(?:\s*->\s*(\d+))?\s*$", text, re.MULTILINE)
    if m:
        return int(m.group(2) or m.group(1))
    m = re.fullmatch(r"\s*(\d+)\s*", text)
    return int(m.group(1)) if m else None
