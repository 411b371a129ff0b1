"""Discovering this machine's devices, and the device memory each process uses (SHELL; §7.1).

The only module that imports ``pynvml`` (NVML), and only when discovery runs.

In order, the first that answers:

* NVIDIA through NVML: the official ``nvidia-ml-py`` bindings (module
  ``pynvml``), imported lazily here and nowhere else (the optional extra
  ``reconciler[nvidia]``); ``NvmlReader`` is the seam tests inject;
* ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV;
* AMD: ``rocm-smi --showmeminfo vram --showproductname --json``;
* Apple silicon: ``system_profiler -json SPDisplaysDataType SPHardwareDataType``,
  the GPU's working set from ``sysctl iogpu.wired_limit_mb`` (``gpuparse.metal_working_set``).

Programs run through ``system/programs.py`` with a cleared environment (only
PATH) and a short timeout; their output is read by the pure
``gpuparse.py``. Nothing found is a value (``Discovery`` with ``tool=None``
and the reasons), never an exception.
"""

from __future__ import annotations

import shutil
from typing import Callable, Protocol, Sequence

import attrs

from reconciler.core.devices import DeviceKind, DeviceUse, FoundDevice
from reconciler.system import programs
from reconciler.world import gpuparse

TIMEOUT = 5.0
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


@attrs.frozen(kw_only=True)
class Discovery:
    """What discovery found: devices, per-process use, the tool that told, and what failed."""

    devices: tuple[FoundDevice, ...] = ()
    uses: tuple[DeviceUse, ...] = ()
    tool: str | None = None  # "nvml", "nvidia-smi", "rocm-smi", "system_profiler"; None: none
    notes: tuple[str, ...] = ()


class NvmlReader(Protocol):
    """The few NVML calls discovery makes (``pynvml`` in production, a double in tests)."""

    def devices(self) -> Sequence[tuple[str, str, str, int, int]]:
        """(name, uuid, pci bus id, total bytes, used bytes) per GPU, in NVML's index order."""

    def processes(self, index: int) -> Sequence[tuple[int, int | None]]:
        """(pid, used bytes or None) of the compute processes on GPU ``index``."""


def from_nvml(reader: NvmlReader) -> Discovery:
    """Devices and uses as NVML reports them (index = NVML's = PCI bus order)."""
    devices, uses = [], []
    for index, (name, uuid, bus, total, used) in enumerate(reader.devices()):
        device_id = f"cuda:{index}"
        devices.append(FoundDevice(id=device_id, kind=DeviceKind.CUDA, name=name, memory=total,
                                   used=used, uuid=uuid, pci_bus=bus))
        uses += [DeviceUse(pid=pid, device=device_id, used=size)
                 for pid, size in reader.processes(index) if size is not None]
    return Discovery(devices=tuple(devices), uses=tuple(uses), tool="nvml")


class _Pynvml:
    """``NvmlReader`` over the real bindings (initialised once, shut down with the process)."""

    def __init__(self, nvml) -> None:
        self.nvml = nvml
        nvml.nvmlInit()

    def _handles(self):
        return [self.nvml.nvmlDeviceGetHandleByIndex(i)
                for i in range(self.nvml.nvmlDeviceGetCount())]

    def devices(self):
        out = []
        for handle in self._handles():
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            name = self.nvml.nvmlDeviceGetName(handle)
            uuid = self.nvml.nvmlDeviceGetUUID(handle)
            bus = self.nvml.nvmlDeviceGetPciInfo(handle).busId
            out.append((_text(name), _text(uuid), _text(bus), int(info.total), int(info.used)))
        return out

    def processes(self, index: int):
        handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        return [(int(p.pid), int(p.usedGpuMemory) if p.usedGpuMemory is not None else None)
                for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_reader() -> tuple[NvmlReader | None, str]:
    """The real NVML, or None and why not (bindings absent, no driver, no GPU)."""
    try:
        import pynvml  # the optional extra reconciler[nvidia]: nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install 'reconciler[nvidia]')"
    try:
        return _Pynvml(pynvml), ""
    except Exception as exc:  # pynvml.NVMLError and friends: no driver, no device
        return None, f"NVML: {exc}"


Run = Callable[[Sequence[str]], programs.Ran]


def _run(argv: Sequence[str]) -> programs.Ran:
    if shutil.which(argv[0], path=PATH) is None:
        return programs.Ran(failure=f"{argv[0]} is not installed")
    return programs.run(argv, env={"PATH": PATH}, timeout=TIMEOUT)


def from_nvidia_smi(run: Run = _run) -> Discovery | str:
    gpus = run(["nvidia-smi", f"--query-gpu={gpuparse.QUERY_GPU}", "--format=csv"])
    if not gpus.ok:
        return gpus.failure or f"nvidia-smi exited {gpus.returncode}"
    devices = gpuparse.nvidia_smi_csv(gpus.stdout.decode("utf-8", "replace"))
    apps = run(["nvidia-smi", f"--query-compute-apps={gpuparse.QUERY_APPS}", "--format=csv"])
    uses = gpuparse.nvidia_smi_apps_csv(apps.stdout.decode("utf-8", "replace"), devices) \
        if apps.ok else ()
    return Discovery(devices=devices, uses=uses, tool="nvidia-smi")


def from_rocm_smi(run: Run = _run) -> Discovery | str:
    ran = run(["rocm-smi", "--showmeminfo", "vram", "--showproductname", "--json"])
    if not ran.ok:
        return ran.failure or f"rocm-smi exited {ran.returncode}"
    return Discovery(devices=gpuparse.rocm_smi_json(ran.stdout.decode("utf-8", "replace")),
                     tool="rocm-smi")


def from_system_profiler(run: Run = _run) -> Discovery | str:
    """Apple silicon's ``metal:0``, its memory the GPU's working set (§7.1): ``sysctl
    iogpu.wired_limit_mb`` when set, else macOS's default share of the machine's memory."""
    shown = run(["system_profiler", "-json", "SPDisplaysDataType"])
    hw = run(["system_profiler", "-json", "SPHardwareDataType"])
    if not (shown.ok and hw.ok):
        return shown.failure or hw.failure or "system_profiler failed"
    wired = run(["sysctl", "iogpu.wired_limit_mb"])
    limit = gpuparse.sysctl_wired_limit_mb(wired.stdout.decode("utf-8", "replace")) \
        if wired.ok else None
    return Discovery(devices=gpuparse.system_profiler(shown.stdout.decode(), hw.stdout.decode(),
                                                      wired_limit_mb=limit),
                     tool="system_profiler")


def discover(run: Run = _run, nvml: Callable[[], tuple[NvmlReader | None, str]] = nvml_reader
             ) -> Discovery:
    """The first source that finds devices; the notes say why each earlier one did not."""
    notes = []
    reader, why = nvml()
    if reader is not None:
        try:
            found = from_nvml(reader)
        except Exception as exc:  # a driver error mid-query: fall back to the tools
            notes.append(f"NVML: {exc}")
        else:
            if found.devices:
                return found
    elif why:
        notes.append(why)
    for source in (from_nvidia_smi, from_rocm_smi, from_system_profiler):
        got = source(run)
        if isinstance(got, str):
            notes.append(got)
        elif got.devices:
            return attrs.evolve(got, notes=tuple(notes))
    return Discovery(notes=tuple(notes))
