"""Discovery parsers on real outputs recorded from real machines (tests/devices/data/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from reconciler.core.devices import DeviceKind, DeviceUse
from reconciler.world import gpuparse

DATA = Path(__file__).parent / "data"
MIB = 2**20


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_nvidia_smi_xml_two_rtx_a5000_with_one_server_spanning_both() -> None:
    """telegraf's dual A5000 capture (A): index = XML order, not minor_number; one pid on both."""
    devices, uses = gpuparse.nvidia_smi_xml(_read("nvidia-smi-q-x_telegraf_2x_rtx-a5000.xml"))
    assert [(d.id, d.kind, d.name, d.memory, d.used) for d in devices] == [
        ("cuda:0", DeviceKind.CUDA, "NVIDIA RTX A5000", 24564 * MIB, 22437 * MIB),
        ("cuda:1", DeviceKind.CUDA, "NVIDIA RTX A5000", 24564 * MIB, 17253 * MIB)]
    assert devices[0].pci_bus == "00000000:81:00.0"
    assert devices[1].uuid == "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"
    assert uses == (DeviceUse(pid=100477, device="cuda:0", used=22430 * MIB),
                    DeviceUse(pid=100477, device="cuda:1", used=17246 * MIB))


def test_nvidia_smi_csv_mixed_cards_with_units_in_the_header() -> None:
    """§7.1 nvidia-smi CSV with units in the header: each card's id, name and memory, from a real
    two-card capture."""
    found = gpuparse.nvidia_smi_csv(_read("nvidia-smi_query-gpu_idx55124687134_2x_rtx4080super+rtx3090.csv"))
    assert [(d.id, d.name, d.memory, d.used) for d in found] == [
        ("cuda:0", "NVIDIA GeForce RTX 4080 SUPER", 16376 * MIB, None),
        ("cuda:1", "NVIDIA GeForce RTX 3090", 24576 * MIB, None)]


def test_nvidia_smi_csv_four_h200_and_a_containers_view_of_one() -> None:
    """§7.1 four H200s read with their memory and use; a container's view of one of them is that
    card, same uuid, as ``cuda:0``."""
    host = gpuparse.nvidia_smi_csv(_read("nvidia-smi_query-gpu_idx60292320197_4x_h200-141c.csv"))
    assert [d.id for d in host] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert {d.memory for d in host} == {144384 * MIB}
    assert host[1].used == 131470 * MIB
    inside = gpuparse.nvidia_smi_csv(
        _read("nvidia-smi_query-gpu_idx60292320197_container-view_1x_h200-141c.csv"))
    assert [(d.id, d.uuid) for d in inside] == [("cuda:0", host[0].uuid)]


def test_nvidia_smi_csv_without_index_or_total_keeps_row_order_and_unknown_memory() -> None:
    """netdata's P100 (A): no index, no memory.total, nounits: memory unknown (0), used 0 MiB."""
    (p100,) = gpuparse.nvidia_smi_csv(_read("nvidia-smi_query-gpu_netdata_1x_tesla-p100.csv"))
    assert (p100.id, p100.name, p100.memory, p100.used) == ("cuda:0", "Tesla P100-PCIE-16GB", 0, 0)


def test_nvidia_smi_csv_the_full_exporter_capture_of_one_h200() -> None:
    """nvidia_gpu_exporter's 214-column capture (A): the fields we need among all the others."""
    (h200,) = gpuparse.nvidia_smi_csv(_read("nvidia-smi_query-gpu-full_exporter-capture_1x_h200.csv"))
    assert (h200.id, h200.name, h200.memory, h200.used) == ("cuda:0", "NVIDIA H200", 143771 * MIB, 0)
    assert h200.pci_bus == "00000000:83:00.0"


def test_compute_apps_rows_map_to_devices_by_uuid() -> None:
    """A pasted benchmark report (C): compute-apps then query-gpu; pid 1912379 on two GPUs."""
    apps, gpus = gpuparse.split_blocks(_read("nvidia-smi_compute-apps+query-gpu_idx71543911637_4gpu_before.txt"))
    devices = gpuparse.nvidia_smi_csv(gpus)
    assert [d.id for d in devices] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert devices[2].used == 74709 * MIB and devices[0].memory == 0  # no memory.total asked
    uses = gpuparse.nvidia_smi_apps_csv(apps, devices)
    assert uses == (DeviceUse(pid=1912379, device="cuda:0", used=518 * MIB),
                    DeviceUse(pid=3891903, device="cuda:2", used=74698 * MIB),
                    DeviceUse(pid=1912379, device="cuda:3", used=518 * MIB))


def test_compute_apps_header_only_when_idle() -> None:
    """§7.1 an idle GPU's compute-apps CSV (a header only) is no use by any process."""
    header = "timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    assert gpuparse.nvidia_smi_apps_csv(header, ()) == ()


def test_rocm_smi_four_mi100_skip_the_system_entry() -> None:
    """§7.1 rocm-smi JSON: four MI100s as ``rocm:0..3`` with memory and use; the ``system`` entry is
    no device."""
    found = gpuparse.rocm_smi_json(_read("rocm-smi_telegraf_4x_mi100_rocm602.json"))
    assert [(d.id, d.kind, d.memory, d.used) for d in found] == [
        (f"rocm:{i}", DeviceKind.ROCM, 34342961152, 6750208) for i in range(4)]


def test_rocm_smi_newer_keys_and_a_pasted_issue() -> None:
    """§7.1 rocm-smi's newer keys and a capture pasted into an issue read the same: memory, use and
    name."""
    (rx7800,) = gpuparse.rocm_smi_json(_read("rocm-smi_gpustack_1x_rx7800xt.json"))
    assert (rx7800.memory, rx7800.used) == (17163091968, 11615076352)
    assert "7800 XT" in rx7800.name
    (rx7900,) = gpuparse.rocm_smi_json(_read("rocm-smi_marimo-9237_1x_rx7900xt.json"))
    assert (rx7900.id, rx7900.name, rx7900.memory) == ("rocm:0", "Radeon RX 7900 XT", 21458059264)


def test_rocm_smi_mi250_is_two_devices() -> None:
    """§7.1 an MI250 (two GCDs) is two devices, each with its own memory."""
    found = gpuparse.rocm_smi_json(_read("rocm-smi_torchserve_mi250-2gcd_metrics.json"))
    assert [(d.id, d.memory) for d in found] == [("rocm:0", 68702699520), ("rocm:1", 68702699520)]


def test_system_profiler_apple_silicon_has_one_metal_device_of_its_working_set() -> None:
    """§7.1 Apple silicon is one ``metal:0`` device; its memory is the GPU's working set (the
    default share of the machine's unified memory: 3/4 of 128 GiB, 2/3 of 7 GiB), not all of it."""
    found = gpuparse.system_profiler(_read("system_profiler_SPDisplays_tirekick_apple-m1pro-14core.json"),
                                     _read("system_profiler_SPHardware_tirekick_m5max-128GB.json"))
    assert [(d.id, d.kind, d.name, d.memory) for d in found] == [
        ("metal:0", DeviceKind.METAL, "Apple M1 Pro", 96 * 2**30)]
    (m1,) = gpuparse.system_profiler(
        _read("system_profiler_SPDisplays_torchserve_apple-m1-7core.json"),
        _read("system_profiler_SPHardware_tirekick_gh-runner-macos26_m1-virtual.json"))
    assert (m1.name, m1.memory) == ("Apple M1", 7 * 2**30 * 2 // 3)


def test_a_set_wired_limit_is_the_working_set() -> None:
    """§7.1 ``iogpu.wired_limit_mb`` set (non-zero) is metal:0's memory, in MiB (llmfit#570's M1 Max:
    26000 → Metal reported 26000 MiB); never more than the machine."""
    limit = gpuparse.sysctl_wired_limit_mb(_read("sysctl_iogpu-wired-limit-write_llmfit-570_m1max-32GB.txt"))
    assert limit == 26000
    (gpu,) = gpuparse.system_profiler(
        _read("system_profiler_SPDisplays_tirekick_apple-m1pro-14core.json"),
        _read("system_profiler_SPHardware_tirekick_m5max-128GB.json"), wired_limit_mb=limit)
    assert gpu.memory == 26000 * MIB
    assert gpuparse.metal_working_set(32 * 2**30, 10**6) == 32 * 2**30


def test_sysctl_outputs_of_an_m2_pro_mac_mini() -> None:
    """§7.1 the recorded M2 Pro (32 GiB, macOS 26.5.1): hw.memsize read; wired_limit_mb 0 is the
    default, so metal:0 is 2/3 of 32 GiB (Metal there said 25.0 GiB: the rule under-promises)."""
    memsize = gpuparse.sysctl_memsize(_read("sysctl_hw-model-memsize_idx66485229638_m2pro-32GiB.txt"))
    assert memsize == 32 * 2**30
    limit = gpuparse.sysctl_wired_limit_mb(_read("sysctl_iogpu-wired-limit_idx66485229638_m2pro-32GiB.txt"))
    assert limit == 0
    working_set = gpuparse.metal_working_set(memsize, limit)
    assert working_set == 32 * 2**30 * 2 // 3 < 25 * 2**30


#: Metal's recommendedMaxWorkingSetSize (MB as llama.cpp prints it: MiB) for a machine's memory,
#: as public logs show it with no wired limit set (SOURCES.md §5, macOS 13/14 era).
REPORTED = [
    (16 * 2**30, 10922.67),  # abetlen/llama-cpp-python#687, M1 Pro 16 GB
    (32 * 2**30, 21845.34),  # ggml-org/llama.cpp#2011 (M1 Max), ollama/ollama#434 (M2 Max)
    (96 * 2**30, 73728.00),  # ggml-org/llama.cpp#3213, M2 Max 96 GB
]


def test_the_default_working_set_is_two_thirds_up_to_36_gib_and_three_quarters_above() -> None:
    """§7.1 with iogpu.wired_limit_mb 0 (or unreadable) metal:0 is 2/3 of memory up to 36 GiB, 3/4
    above: Metal's own figures in public logs, to the hundredth of a MiB; unknown memory is 0."""
    for memory, reported_mib in REPORTED:
        for limit in (0, None):
            assert abs(gpuparse.metal_working_set(memory, limit) / MIB - reported_mib) < 0.01
    assert gpuparse.metal_working_set(36 * 2**30, 0) == 24 * 2**30
    assert gpuparse.metal_working_set(48 * 2**30, 0) == 36 * 2**30
    assert gpuparse.metal_working_set(0, 4096) == 0


def test_sysctl_parsers_take_both_forms_and_nothing_else() -> None:
    """``name: value``, ``-n``'s bare value, a write's ``old -> new``; an unknown oid is None."""
    assert gpuparse.sysctl_memsize("17179869184\n") == 16 * 2**30  # hand-written: -n's form
    assert gpuparse.sysctl_wired_limit_mb("0\n") == 0  # hand-written: -n's form
    assert gpuparse.sysctl_wired_limit_mb(
        "sysctl: unknown oid 'iogpu.wired_limit_mb'\n") is None  # hand-written
    assert gpuparse.sysctl_wired_limit_mb("iogpu.wired_limit_mb: 0 -> 14000\n") == 14000


def test_sysctl_memsize_agrees_with_system_profiler() -> None:
    """§7.1 ``sysctl hw.memsize`` gives the same unified memory as system_profiler."""
    assert gpuparse.sysctl_memsize(_read("sysctl_tirekick_gh-runner-macos26_m1-virtual.txt")) == 7 * 2**30
