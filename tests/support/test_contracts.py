"""The shared test doubles keep the contract of what they stand for.

Each contract runs the same assertions against the fake and against the real thing; the real
side runs where it can (NVML: a machine with an NVIDIA GPU and ``nvidia-ml-py``) and is
skipped with its reason elsewhere. The role writer's documents pass the real loader.
"""

from __future__ import annotations

import re

import pytest
import yaml

from reconciler.manifests import loader
from reconciler.world import devices
from tests.support import roles
from tests.support.fakes import FakeNvml


def _real_nvml():
    reader, why = devices.nvml_reader()
    if reader is None:
        pytest.skip(reason=f"no real NVML here: {why}")
    return reader


@pytest.fixture(params=["fake", "real"])
def nvml(request):
    return FakeNvml() if request.param == "fake" else _real_nvml()


def test_an_nvml_reader_reports_devices_as_discovery_reads_them(nvml) -> None:
    """§7.1 ``NvmlReader.devices()``: per GPU a name, a ``GPU-``/``MIG-`` uuid, a PCI bus id,
    total and used bytes with used ≤ total; the fake and the real NVML alike."""
    found = nvml.devices()
    for name, uuid, bus, total, used in found:
        assert isinstance(name, str) and name
        assert uuid.startswith(("GPU-", "MIG-")), uuid
        assert re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", bus), bus
        assert isinstance(total, int) and isinstance(used, int) and 0 <= used <= total
    assert [d.id for d in devices.from_nvml(nvml).devices] == [f"cuda:{i}" for i in range(len(found))]


def test_an_nvml_reader_reports_processes_by_pid(nvml) -> None:
    """§7.1 ``NvmlReader.processes(i)``: (pid, bytes or None) per compute process; discovery
    keeps those with a size as uses of ``cuda:i``."""
    for index in range(len(nvml.devices())):
        for pid, used in nvml.processes(index):
            assert isinstance(pid, int) and pid > 0
            assert used is None or (isinstance(used, int) and used >= 0)
    uses = devices.from_nvml(nvml).uses
    assert all(u.device.startswith("cuda:") and u.used is not None for u in uses)


@pytest.mark.parametrize("kwargs", [
    {}, {"state": "on-demand", "memory": "{weights: 1GB}", "placement": "{devices: {count: 1}}"},
    {"mode": "adopted", "extra_args": None, "serve": "host: 127.0.0.1"},
    {"runtime": "ollama", "model": "llama", "ctx": None, "extra_args": None, "keep_alive": "10m"},
    {"raw": "memory: {kv: 32MiB}", "ctx": 256},
])
def test_the_role_writer_writes_documents_the_loader_accepts(kwargs) -> None:
    """The e2e role writer's InferenceSpec is schema-valid and loads as the role it names, with
    the port it was given (a writer that drifts from the schema fails here, not in an e2e run)."""
    text = roles.inference_spec("chat", 8123, **kwargs)
    model = kwargs.get("model", "tiny")
    fmt = "format: ollama\n  source: {ollama_tag: \"llama3:8b\"}" if model == "llama" else (
        "format: gguf\n  root: /m\n  shards: [{path: t.gguf, size: 1, sha256: " + "a" * 64 + "}]")
    docs = [("node.yaml", b"apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
                          b"spec: {devices: [{id: 'cuda:0', memory: 8GB}]}\n"),
            ("model.yaml", f"apiVersion: reconciler/v1\nkind: Model\nmetadata: {{name: {model}}}\n"
                           f"spec:\n  {fmt}\n".encode()),
            ("role.yaml", text.encode())]
    result = loader.load(docs)
    assert result.ok, [str(p) for p in result.problems]
    role = result.desired.role("chat")
    assert role.serve.port == 8123 and yaml.safe_load(text)["metadata"]["name"] == "chat"


def test_the_shared_world_values_are_spelled_in_one_place() -> None:
    """The values tests and benches share (the reconciler's environment, the qwen GGUF) are
    written in tests/support/worlds.py alone: a copy elsewhere would drift from it unseen."""
    from pathlib import Path

    root = Path(__file__).parents[2]
    spelled = {'("HOME", "/home/op"), ("PATH", "/usr/bin:/bin")': set(), 'root="/m/qwen"': set()}
    for path in [*root.joinpath("tests").rglob("*.py"), *root.joinpath("bench").rglob("*.py")]:
        if path == Path(__file__):
            continue
        text = path.read_text()
        for literal, where in spelled.items():
            if literal in text:
                where.add(path.relative_to(root).as_posix())
    assert spelled['("HOME", "/home/op"), ("PATH", "/usr/bin:/bin")'] == {"tests/support/worlds.py"}
    assert spelled['root="/m/qwen"'] == set()  # worlds.gguf() builds it from the name
