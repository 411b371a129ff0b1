"""§7.1 on a real NVIDIA GPU: discovery through NVML and the observed memory of a real process.

These run only where NVML answers with at least one GPU (the ``nvidia-ml-py``
bindings installed: ``pip install 'reconciler[nvidia]'``, and a driver).
Elsewhere every test here is *skipped with the reason* (``pytest -ra`` lists
it): a skip is never counted as a pass. On these development machines there
is no GPU, so they have not run here; run them on a GPU machine with
``pytest -m gpu tests/gpu -ra``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from reconciler.world import devices

pytestmark = pytest.mark.gpu


def _nvml_or_skip():
    reader, why = devices.nvml_reader()
    if reader is None:
        pytest.skip(reason=f"no NVIDIA GPU through NVML here: {why}")
    if not reader.devices():
        pytest.skip(reason="NVML answers but reports no GPU")
    return reader


def test_nvml_discovery_reports_every_gpu_with_its_memory() -> None:
    """§7.1 on a real GPU: NVML reports every device with its memory, use and uuid, and discovery
    prefers it."""
    reader = _nvml_or_skip()
    found = devices.from_nvml(reader)
    assert found.tool == "nvml" and found.devices
    for index, device in enumerate(found.devices):
        assert device.id == f"cuda:{index}"
        assert device.memory > 2**30 and 0 <= (device.used or 0) <= device.memory
        assert device.uuid.startswith(("GPU-", "MIG-")), device.uuid
    # discover() prefers NVML when it answers.
    assert devices.discover().tool == "nvml"


def test_nvidia_smi_agrees_with_nvml_on_the_devices() -> None:
    """§7.1 on a real GPU: nvidia-smi and NVML find the same devices, ids and uuids, memory within a
    MiB."""
    _nvml_or_skip()
    via_smi = devices.from_nvidia_smi()
    if isinstance(via_smi, str):
        pytest.skip(reason=f"nvidia-smi: {via_smi}")
    via_nvml = devices.from_nvml(devices.nvml_reader()[0])
    assert [(d.id, d.uuid) for d in via_smi.devices] == [(d.id, d.uuid) for d in via_nvml.devices]
    for a, b in zip(via_smi.devices, via_nvml.devices):
        assert abs(a.memory - b.memory) <= 2**20  # MiB rounding


CHILD = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcudart.so") if len(sys.argv) < 2 else ctypes.CDLL(sys.argv[1])
ptr = ctypes.c_void_p()
assert cuda.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(512 * 2**20)) == 0
print("ready", flush=True)
time.sleep(30)
"""


def _cuda_runtime() -> str | None:
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"):
        try:
            import ctypes

            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


def test_the_memory_of_a_real_process_is_observed_by_pid() -> None:
    """A child allocates 512 MiB on GPU 0; NVML reports at least that for its pid on cuda:0."""
    reader = _nvml_or_skip()
    runtime = _cuda_runtime()
    if runtime is None:
        pytest.skip(reason="no CUDA runtime library (libcudart) to allocate device memory with")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, runtime], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline, mine = time.monotonic() + 10, []
        while time.monotonic() < deadline and not mine:
            mine = [u for u in devices.from_nvml(reader).uses if u.pid == child.pid]
            time.sleep(0.2)
        assert mine, "NVML does not list the child's pid (a container without PID namespace?)"
        assert mine[0].device == "cuda:0" and mine[0].used >= 512 * 2**20
    finally:
        child.kill()
        child.wait()
