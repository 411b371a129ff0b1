"""Discovery's order and fallbacks (world/devices.py) with NVML and the tools injected.

The NVML path runs here through an injected reader (no GPU on these
machines); the real bindings run in ``tests/gpu/`` where a GPU is present.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.core.desired import NodeConfig
from reconciler.core.devices import Device, DeviceKind, DeviceUse, compare, devices_yaml
from reconciler.system.programs import Ran
from reconciler.world import devices
from tests.support.fakes import FakeNvml

DATA = Path(__file__).parent / "data"
GIB = 2**30


def _no_nvml():
    return None, "nvidia-ml-py is not installed"


def _tools(outputs: dict[str, str]):
    def run(argv):
        for key, text in outputs.items():
            if key in " ".join(argv):
                return Ran(returncode=0, stdout=text.encode())
        return Ran(failure=f"{argv[0]} is not installed")
    return run


def test_nvml_comes_first_and_reports_use_by_pid() -> None:
    """§7.1 discovery asks NVML first: its devices, memory and use, and the memory each pid uses."""
    found = devices.discover(run=_tools({}), nvml=lambda: (FakeNvml(), ""))
    assert found.tool == "nvml"
    assert [(d.id, d.memory, d.used) for d in found.devices] == [
        ("cuda:0", 24 * GIB, 3 * GIB), ("cuda:1", 24 * GIB, 0)]
    assert found.uses == (DeviceUse(pid=4242, device="cuda:0", used=3 * GIB),)


def test_without_nvml_nvidia_smi_csv_is_read() -> None:
    """§7.1 without NVML, nvidia-smi's CSV is read, and the note says why NVML was not used."""
    gpus = (DATA / "nvidia-smi_query-gpu_idx60292320197_4x_h200-141c.csv").read_text()
    found = devices.discover(run=_tools({"--query-gpu": gpus, "--query-compute-apps":
                                         "gpu_uuid, pid, used_gpu_memory [MiB]\n"}), nvml=_no_nvml)
    assert found.tool == "nvidia-smi" and len(found.devices) == 4
    assert found.notes == ("nvidia-ml-py is not installed",)


def test_amd_then_apple_then_nothing() -> None:
    """§7.1 without NVIDIA tools rocm-smi is asked, then Apple's; with none, no devices and a note
    per missing tool."""
    rocm = (DATA / "rocm-smi_marimo-9237_1x_rx7900xt.json").read_text()
    found = devices.discover(run=_tools({"rocm-smi": rocm}), nvml=_no_nvml)
    assert found.tool == "rocm-smi" and found.devices[0].id == "rocm:0"
    displays = (DATA / "system_profiler_SPDisplays_tirekick_apple-m1pro-14core.json").read_text()
    hardware = (DATA / "system_profiler_SPHardware_tirekick_m5max-128GB.json").read_text()
    apple = devices.discover(run=_tools({"SPDisplaysDataType": displays,
                                         "SPHardwareDataType": hardware}), nvml=_no_nvml)
    assert apple.tool == "system_profiler" and apple.devices[0].id == "metal:0"
    nothing = devices.discover(run=_tools({}), nvml=_no_nvml)
    assert nothing.tool is None and nothing.devices == ()
    assert "nvidia-smi is not installed" in nothing.notes


def test_metal_0_is_the_working_set_sysctl_says() -> None:
    """§7.1 on a Mac, discovery asks ``sysctl iogpu.wired_limit_mb``: set, it is metal:0's memory;
    0 or no such oid (sysctl fails), the default share of the machine (3/4 of 128 GiB)."""
    displays = (DATA / "system_profiler_SPDisplays_tirekick_apple-m1pro-14core.json").read_text()
    hardware = (DATA / "system_profiler_SPHardware_tirekick_m5max-128GB.json").read_text()
    wired = (DATA / "sysctl_iogpu-wired-limit-write_llmfit-570_m1max-32GB.txt").read_text()
    tools = {"SPDisplaysDataType": displays, "SPHardwareDataType": hardware}
    set_ = devices.discover(run=_tools({**tools, "iogpu.wired_limit_mb": wired}), nvml=_no_nvml)
    assert [(d.id, d.memory) for d in set_.devices] == [("metal:0", 26000 * 2**20)]
    default = devices.discover(run=_tools(tools), nvml=_no_nvml)
    assert [(d.id, d.memory) for d in default.devices] == [("metal:0", 96 * GIB)]


def test_declared_against_found_missing_smaller_undeclared() -> None:
    """§7.1 declared against found: a device found smaller, one not found (missing) and one found
    but undeclared are each said."""
    found = devices.discover(run=_tools({}), nvml=lambda: (FakeNvml(), "")).devices
    node = NodeConfig(devices=(Device(id="cuda:0", kind=DeviceKind.CUDA, memory=30 * GIB),
                               Device(id="cuda:2", kind=DeviceKind.CUDA, memory=8 * GIB)))
    states = {c.id: c.state for c in compare(node.devices, found)}
    assert states == {"cuda:0": "smaller", "cuda:1": "undeclared", "cuda:2": "missing"}


def test_devices_yaml_leaves_room_for_the_driver_and_loads_back() -> None:
    """``capabilities --devices-yaml`` declares a little less than found (room for the driver) and
    its YAML loads back."""
    import yaml

    found = devices.discover(run=_tools({}), nvml=lambda: (FakeNvml(), "")).devices
    text = devices_yaml(found)
    data = yaml.safe_load(text)
    assert data["devices"][0] == {"id": "cuda:0", "kind": "cuda", "memory": "23.1GB"}


def test_capabilities_reports_devices_and_prints_yaml(tmp_path, capsys, monkeypatch) -> None:
    """The command: found vs declared (smaller → exit 1), and --devices-yaml for what was found."""
    from reconciler import cli

    monkeypatch.setattr(devices, "discover",
                        lambda: devices.from_nvml(FakeNvml()))
    (tmp_path / "node.yaml").write_text(
        "apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
        "spec: {devices: [{id: 'cuda:0', memory: 30GB}, {id: 'cuda:1', memory: 20GB}]}\n")
    code = cli.main(["-f", str(tmp_path), "capabilities"])
    out = capsys.readouterr().out
    assert code == 1
    assert "cuda:0     declared 30.0 GB   found 25.8 GB   smaller" in out, out
    assert "cuda:1     declared 20.0 GB   found 25.8 GB   ok" in out, out
    assert cli.main(["-f", str(tmp_path), "capabilities", "--devices-yaml"]) == 0
    assert capsys.readouterr().out.startswith('devices:\n  - {id: "cuda:0", kind: cuda, memory: 23.1GB}')


def test_capabilities_without_any_tool_trusts_the_declaration(tmp_path, capsys, monkeypatch) -> None:
    """§7.1 with no discovery tool, ``capabilities`` says the declaration is unchecked (exit 0);
    ``--devices-yaml`` has nothing to write (exit 1)."""
    from reconciler import cli

    monkeypatch.setattr(devices, "discover", lambda: devices.Discovery(notes=("no tool",)))
    (tmp_path / "node.yaml").write_text(
        "apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
        "spec: {devices: [{id: 'cuda:0', memory: 30GB}]}\n")
    assert cli.main(["-f", str(tmp_path), "capabilities"]) == 0
    assert "unchecked: no discovery tool answered" in capsys.readouterr().out
    assert cli.main(["-f", str(tmp_path), "capabilities", "--devices-yaml"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "devices: []\n" and "no tool" in captured.err


def test_a_device_of_unknown_size_is_ok_and_takes_claims_as_declared() -> None:
    """§7.1 only a device found missing or smaller takes no claim: netdata's real P100 capture
    (nvidia-smi reports no memory.total: read as 0, unknown) is ``ok`` for ``capabilities``
    *and* usable for the planner, which read one rule (``found_state``); a size reported
    smaller than declared is ``smaller`` for both."""
    from reconciler.planner import placement
    from reconciler.world import gpuparse

    (p100,) = gpuparse.nvidia_smi_csv((DATA / "nvidia-smi_query-gpu_netdata_1x_tesla-p100.csv")
                                      .read_text())
    assert p100.memory == 0  # unknown
    declared = (Device(id="cuda:0", kind=DeviceKind.CUDA, memory=15 * 10**9),)
    (row,) = compare(declared, (p100,))
    assert (row.state, row.found) == ("ok", None) and "no memory size" in row.why
    assert placement.unusable(declared, (p100,)) == {}
    small = (Device(id="cuda:0", kind=DeviceKind.CUDA, memory=17 * GIB),)
    reported = gpuparse.nvidia_smi_csv(
        (DATA / "nvidia-smi_query-gpu_idx55124687134_2x_rtx4080super+rtx3090.csv").read_text())
    assert [c.state for c in compare(small, reported[:1])] == ["smaller"]  # 16376 MiB < 17 GiB
    assert list(placement.unusable(small, reported[:1])) == ["cuda:0"]


def test_smaller_only_when_found_smaller() -> None:
    """§7.1 ``capabilities``: ``smaller`` only when found with less memory than declared; a
    device found with exactly the declared memory is ``ok`` and takes claims."""
    from reconciler.core.devices import FoundDevice
    from reconciler.planner import placement

    declared = (Device(id="cuda:0", kind=DeviceKind.CUDA, memory=24 * GIB),)
    same = (FoundDevice(id="cuda:0", kind=DeviceKind.CUDA, name="gpu", memory=24 * GIB),)
    assert [c.state for c in compare(declared, same)] == ["ok"]
    assert placement.unusable(declared, same) == {}
    less = (FoundDevice(id="cuda:0", kind=DeviceKind.CUDA, name="gpu", memory=24 * GIB - 1),)
    assert [c.state for c in compare(declared, less)] == ["smaller"]


def test_devices_yaml_leaves_a_device_of_unknown_size_for_the_operator() -> None:
    """§7.1 ``--devices-yaml`` never writes ``memory: 0.0GB`` (which validate refuses) for a
    device whose size the tool does not report (the real P100 capture): it is a comment
    naming the device, and the snippet still loads as a list."""
    import yaml

    from reconciler.world import gpuparse

    found = gpuparse.nvidia_smi_csv((DATA / "nvidia-smi_query-gpu_netdata_1x_tesla-p100.csv")
                                    .read_text())
    text = devices_yaml(found)
    assert yaml.safe_load(text) == {"devices": []}
    assert '# - {id: "cuda:0", kind: cuda, memory: ...}  # Tesla P100-PCIE-16GB' in text
    assert devices_yaml(()) == "devices: []\n"


def test_capabilities_on_a_mac_s_recorded_outputs_flags_the_whole_memory(tmp_path, capsys,
                                                                         monkeypatch) -> None:
    """§7.1 README "On a Mac": on recorded system_profiler outputs (128 GiB), metal:0 is found as
    its working set (96 GiB = 103.1 GB), so declaring the machine's 128 GiB is ``smaller`` (exit 1)
    and --devices-yaml offers 90% of the working set."""
    from reconciler import cli

    outputs = {"SPDisplaysDataType": "system_profiler_SPDisplays_tirekick_apple-m1pro-14core.json",
               "SPHardwareDataType": "system_profiler_SPHardware_tirekick_m5max-128GB.json"}
    run = _tools({key: (DATA / name).read_text() for key, name in outputs.items()})
    monkeypatch.setattr(devices, "discover", lambda: devices.from_system_profiler(run))
    (tmp_path / "node.yaml").write_text(
        "apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: mac-mini}\n"
        "spec: {devices: [{id: 'metal:0', kind: metal, memory: 128GiB}]}\n")
    assert cli.main(["-f", str(tmp_path), "capabilities"]) == 1
    assert ("  metal:0    declared 137.4 GB  found 103.1 GB  smaller: declared larger than found: "
            "roles placed on it are unplaceable") in capsys.readouterr().out
    assert cli.main(["-f", str(tmp_path), "capabilities", "--devices-yaml"]) == 0
    assert capsys.readouterr().out == (
        'devices:\n  - {id: "metal:0", kind: metal, memory: 92.7GB}  # Apple M1 Pro, 96.0 GiB\n')
