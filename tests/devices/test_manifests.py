"""NodeConfig devices and spec.placement.devices as the loader reads and checks them (§7.1)."""

from __future__ import annotations

from reconciler.core.devices import Device, DeviceKind, DeviceRequest
from reconciler.manifests import loader

GB = 10**9
SHA = "a" * 64
MODEL = f"""\
apiVersion: reconciler/v1
kind: Model
metadata: {{name: m}}
spec:
  format: gguf
  root: /srv/models/m
  shards:
    - {{path: m.gguf, size: 100, sha256: {SHA}}}
"""


def _role(name: str, port: int, extra: str, runtime: str = "llamacpp", args: str = "") -> str:
    model = "model: m, " if runtime != "ollama" else ""
    return (f"---\napiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {{name: {name}}}\n"
            f"spec: {{runtime: {runtime}, mode: managed, {model}serve: {{port: {port}{args}}}{extra}}}\n")


def _load(devices: str, *roles: str):
    node = ("---\napiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
            "spec: {allowed_ports: {from: 8000, to: 8999}, "
            "serve_programs: {llamacpp: /usr/bin/llama-server}" + devices + "}\n")
    return loader.load([("m.yaml", (MODEL + node + "".join(roles)).encode())])


def _messages(result) -> list[str]:
    return [f"{'.'.join(map(str, p.path)) if hasattr(p, 'path') else ''} {p.message}"
            for p in result.problems]


def test_devices_and_placement_are_parsed_with_units() -> None:
    """§7.1 NodeConfig devices (sorted by id, kind from the id) and ``placement.devices`` (ids,
    split, count) are parsed with units."""
    result = _load(", devices: [{id: 'cuda:1', kind: cuda, memory: 24GB}, {id: 'cuda:0', memory: 24GB}]",
                   _role("coder", 8090, ", memory: {weights: 12GB, kv: 1GB, host: 2GB}, "
                                        "placement: {devices: {ids: ['cuda:0', 'cuda:1'], split: [3, 1]}}"),
                   _role("chat", 8091, ", placement: {devices: {count: 1}}"))
    assert result.ok, result.problems
    node = result.desired.node
    assert node.devices == (Device(id="cuda:0", kind=DeviceKind.CUDA, memory=24 * GB),
                            Device(id="cuda:1", kind=DeviceKind.CUDA, memory=24 * GB))
    coder = result.desired.role("coder")
    assert coder.devices == DeviceRequest(ids=("cuda:0", "cuda:1"), split=(3.0, 1.0))
    assert coder.memory.host == 2 * GB and coder.host_need == 2 * GB
    assert result.desired.role("chat").devices == DeviceRequest(count=1)


def test_a_role_without_devices_counts_its_footprint_on_the_host() -> None:
    """§7.1 a role without ``placement.devices`` claims its whole footprint (weights + kv) from host
    memory."""
    result = _load("", _role("coder", 8090, ", memory: {weights: 12GB, kv: 1GB}"))
    coder = result.desired.role("coder")
    assert coder.devices is None and coder.host_need == 13 * GB


def test_device_problems_are_all_reported_at_their_paths() -> None:
    """§1.5/§7.1 every device problem (kind against id, duplicate id, zero memory, split length,
    count and ids together, mixed kinds) is reported, each at its path."""
    result = _load(", devices: [{id: 'cuda:0', kind: rocm, memory: 24GB}, {id: 'cuda:0', memory: 0}]",
                   _role("a", 8090, ", placement: {devices: {ids: ['cuda:0', 'cuda:1'], split: [1]}}"),
                   _role("b", 8091, ", placement: {devices: {count: 3}}"),
                   _role("c", 8092, ", placement: {devices: {count: 1, ids: ['cuda:0']}}"),
                   _role("d", 8093, ", placement: {devices: {ids: ['cuda:0', 'rocm:0']}}"))
    text = "\n".join(str(p) for p in result.problems)
    assert not result.ok
    assert "does not match the id 'cuda:0'" in text
    assert "cuda:0 is declared twice" in text
    assert "must be more than 0 bytes" in text
    assert "has 1 weights for 2 devices" in text
    assert "not both" in text  # count and ids
    assert "must all be of one kind" in text


def test_ids_not_declared_and_counts_beyond_the_node_are_errors() -> None:
    """§7.1 ids the node does not declare, and a count beyond the devices it declares, are errors
    naming what it has."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                   _role("a", 8090, ", placement: {devices: {ids: ['cuda:3']}}"),
                   _role("b", 8091, ", placement: {devices: {count: 2}}"))
    text = "\n".join(str(p) for p in result.problems)
    assert "cuda:3: not a device of this node (it declares cuda:0)" in text
    assert "asks for 2 devices; this node declares 1 it can use (cuda:0)" in text


def test_device_flags_are_the_planners_with_placement_devices() -> None:
    """With placement.devices, --tensor-split and friends set by hand are an error that says so."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                   _role("a", 8090, ", placement: {devices: {count: 1}}",
                         args=", extra_args: ['--tensor-split', '3', '--main-gpu', '1']"))
    text = "\n".join(str(p) for p in result.problems)
    assert "--tensor-split is set by the planner from spec.placement.devices" in text
    assert "--main-gpu is set by the planner" in text


def test_ollama_roles_claim_host_memory_only() -> None:
    """§7.1 an Ollama role cannot claim devices: it claims host memory only."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                   _role("a", 11434, ", model: m, placement: {devices: {count: 1}}", runtime="ollama"))
    text = "\n".join(str(p) for p in result.problems)
    assert "ollama roles claim host memory only" in text


def test_always_on_roles_beyond_a_device_are_a_warning_naming_it() -> None:
    """§7.1 always-on roles that cannot all fit the devices at once are a warning naming the role
    and its need, not an error."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]",
                   _role("a", 8090, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"),
                   _role("b", 8091, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"),
                   _role("c", 8092, ", memory: {weights: 12GB}, placement: {devices: {ids: ['cuda:1']}}"))
    assert result.ok, result.problems
    text = "\n".join(str(w) for w in result.warnings)
    assert "do not all fit its devices at once" in text
    assert "b needs 20.0 GB on 1 device" in text, text


def test_always_on_roles_that_fit_their_devices_warn_nothing_about_devices() -> None:
    """§7.1 always-on roles that fit their devices at once give no device warning."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]",
                   _role("a", 8090, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"),
                   _role("b", 8091, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"))
    assert result.ok
    assert not [w for w in result.warnings if "devices" in str(w)]


def test_every_spelling_and_the_visibility_env_are_the_planners_with_placement_devices() -> None:
    """`-ts 1,1`, `--split-mode=row` and a role's CUDA_VISIBLE_DEVICES are refused on a role
    with placement.devices; without it they are ordinary typed values (BEHAVIOUR §1.4)."""
    args = ", extra_args: ['-ts', '1,1', '--split-mode=row']"
    on = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
               _role("a", 8090, ", placement: {devices: {count: 1}}, env: {CUDA_VISIBLE_DEVICES: '1'}",
                     args=args))
    text = "\n".join(str(p) for p in on.problems)
    assert "-ts is set by the planner" in text and "--split-mode is set by the planner" in text
    env = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                _role("a", 8090, ", placement: {devices: {count: 1}}, env: {CUDA_VISIBLE_DEVICES: '1'}"))
    assert "CUDA_VISIBLE_DEVICES is set by the planner" in "\n".join(str(p) for p in env.problems)
    off = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                _role("a", 8090, ", env: {CUDA_VISIBLE_DEVICES: '1'}", args=args))
    assert off.ok, off.problems


def test_one_id_per_device_refuses_a_second_spelling_of_an_index() -> None:
    """§7.1 one id per device, in one normal form: ``cuda:01`` beside ``cuda:1`` (both index 1)
    would plan two roles onto one GPU, so an index with a leading zero is refused where it is
    written (NodeConfig ``devices`` and a role's ``ids``), FILE:LINE: $.path: message; the
    same spelling twice is refused as declared twice."""
    result = _load(", devices: [{id: 'cuda:1', memory: 22GB}, {id: \"cuda:01\", memory: 22GB}]",
                   _role("a", 8090, ", memory: {weights: 20GB}, placement: {devices: {ids: ['cuda:1']}}"),
                   _role("b", 8091, ", memory: {weights: 20GB}, placement: {devices: {ids: ['cuda:01']}}"))
    assert not result.ok
    text = [str(p) for p in result.problems]
    assert any(t.startswith("m.yaml:13: $.spec.devices[1].id: must be a device id")
               and "'cuda:01' is written 'cuda:1'" in t for t in text), text
    assert any(t.startswith("m.yaml:23: $.spec.placement.devices.ids[0]: must be a device id")
               for t in text), text
    for fine in ("cuda:0", "cuda:10", "rocm:999"):
        ok = _load(f", devices: [{{id: '{fine}', memory: 22GB}}]")
        assert ok.ok, (fine, ok.problems)
    twice = _load(", devices: [{id: 'cuda:1', memory: 22GB}, {id: 'cuda:1', memory: 22GB}]")
    assert [str(p) for p in twice.problems] == [
        "m.yaml:13: $.spec.devices[1].id: cuda:1 is declared twice"]


def test_a_count_is_of_one_kind_so_mixed_kinds_do_not_add_up() -> None:
    """§7.1 ``{count: 2}`` on a node with one ``cuda`` and one ``rocm`` device could never be
    placed (a count is of one kind: a server runs on one backend): an error, not silence."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'rocm:0', memory: 24GB}]",
                   _role("a", 8090, ", placement: {devices: {count: 2}}"))
    assert [str(p) for p in result.problems] == [
        "m.yaml:18: $.spec.placement.devices.count: asks for 2 devices; this node declares "
        "at most 1 of one kind it can use (cuda:0, rocm:0), and a count is of one kind: a "
        "server runs on one backend"]
    one = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'rocm:0', memory: 24GB}]",
                _role("a", 8090, ", placement: {devices: {count: 1}}"))
    assert one.ok, one.problems


def test_a_count_equal_to_the_nodes_devices_is_fine() -> None:
    """§7.1 a count of exactly the node's devices (of the kind) is placeable: no error, and
    the always-on role that fits them warns nothing."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]",
                   _role("a", 8090, ", memory: {weights: 40GB}, placement: {devices: {count: 2}}"))
    assert result.ok, result.problems
    assert not [w for w in result.warnings if "devices" in str(w)]


def test_a_count_beyond_the_devices_the_runtime_can_use_is_an_error() -> None:
    """§7.1 mlx-lm runs on metal only: a count of 1 on a node with only CUDA devices is
    beyond the devices it can use (an error), though the node declares two devices."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]",
                   _role("a", 8090, ", placement: {devices: {count: 1}}", runtime="mlx-lm"))
    text = "\n".join(str(p) for p in result.problems)
    assert "asks for 1 device; this node declares 0 it can use (cuda:0, cuda:1)" in text, text


def _device_warnings(result) -> list[str]:
    return [str(w) for w in result.warnings if "fit its devices" in str(w)]


def test_only_always_on_roles_must_fit_the_devices_at_once() -> None:
    """§7.1 validate warns when the always-on roles cannot all be placed at once; on-demand
    roles take turns (the ledger and eviction place them when asked), so two on-demand
    roles that do not fit together warn nothing about devices."""
    two = ", devices: [{id: 'cuda:0', memory: 24GB}]"
    on_demand = _load(two, _role("a", 8090, ", state: on-demand, memory: {weights: 20GB}, "
                                            "placement: {devices: {count: 1}}"),
                      _role("b", 8091, ", state: on-demand, memory: {weights: 20GB}, "
                                       "placement: {devices: {count: 1}}"))
    assert on_demand.ok, on_demand.problems
    assert _device_warnings(on_demand) == []
    always = _load(two, _role("a", 8090, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"),
                   _role("b", 8091, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"))
    assert len(_device_warnings(always)) == 1


def test_a_share_exactly_equal_to_the_free_memory_fits_in_validate() -> None:
    """§7.1 validate places as the planner does: a share of exactly a device's free memory
    fits, for a count and for fixed ids (no warning); one byte more warns."""
    node = ", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]"
    exact = _load(node, _role("a", 8090, ", memory: {weights: 24GB}, placement: {devices: {count: 1}}"),
                  _role("b", 8091, ", memory: {weights: 14GB}, placement: {devices: {ids: ['cuda:1']}}"),
                  _role("c", 8092, ", memory: {weights: 10GB}, placement: {devices: {ids: ['cuda:1']}}"))
    assert exact.ok, exact.problems
    assert _device_warnings(exact) == []
    over = _load(node, _role("a", 8090, ", memory: {weights: 24GB}, placement: {devices: {count: 1}}"),
                 _role("b", 8091, ", memory: {weights: 14GB}, placement: {devices: {ids: ['cuda:1']}}"),
                 _role("c", 8092, ", memory: {weights: 10000000001}, placement: {devices: {ids: ['cuda:1']}}"))
    assert len(_device_warnings(over)) == 1


def test_validate_places_fixed_ids_first_as_the_planner_does() -> None:
    """§7.1 issue 27's case: `a` (port 8000, count 1) and `b` (port 8001, ids cuda:0), 20 GB
    each on two 24 GB devices: placed fixed ids first, both fit (no warning), as the planner
    places them (golden case devices-fixed-ids-placed-first)."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]",
                   _role("a", 8000, ", memory: {weights: 20GB}, placement: {devices: {count: 1}}"),
                   _role("b", 8001, ", memory: {weights: 20GB}, placement: {devices: {ids: ['cuda:0']}}"))
    assert result.ok, result.problems
    assert _device_warnings(result) == []


def test_placement_devices_needs_mode_managed() -> None:
    """§7.1 an adopted server is never launched, so nothing could give it devices:
    placement.devices on it is an error at its path."""
    result = _load(", devices: [{id: 'cuda:0', memory: 24GB}]",
                   _role("a", 8090, ", placement: {devices: {count: 1}}").replace(
                       "mode: managed", "mode: adopted"))
    assert any("$.spec.placement.devices: placement.devices needs mode: managed" in str(p)
               for p in result.problems), result.problems


def test_ids_of_a_kind_the_runtime_cannot_use_are_errors() -> None:
    """§7.1 mlx-lm runs on metal only: `ids: [cuda:0]` on an mlx-lm role is an error that
    says so; `metal:0` is fine."""
    node = ", devices: [{id: 'cuda:0', memory: 24GB}, {id: 'metal:0', memory: 24GB}]"
    bad = _load(node, _role("a", 8090, ", placement: {devices: {ids: ['cuda:0']}}", runtime="mlx-lm"))
    assert any("cuda:0: mlx-lm runs on metal devices only" in str(p) for p in bad.problems), \
        bad.problems
    good = _load(node, _role("a", 8090, ", placement: {devices: {ids: ['metal:0']}}", runtime="mlx-lm"))
    assert not [p for p in good.problems if "devices" in str(p)], good.problems


def test_every_spelling_of_the_device_flags_and_cuda_device_order_are_the_planners() -> None:
    """§7.1 with placement.devices the planner sets the device flags and the CUDA device order:
    `--tensor_split` (llama.cpp's underscore spelling of --tensor-split) in extra_args and
    CUDA_DEVICE_ORDER in env are refused; without placement.devices both are allowed."""
    node = ", devices: [{id: 'cuda:0', memory: 24GB}]"
    extra = ", env: {CUDA_DEVICE_ORDER: FASTEST_FIRST}"
    args = ", extra_args: ['--tensor_split', '1']"
    flags = _load(node, _role("a", 8090, ", placement: {devices: {count: 1}}", args=args))
    assert [str(p) for p in flags.problems] == [
        "m.yaml:18: $.spec.serve.extra_args[0]: --tensor_split is set by the planner from "
        "spec.placement.devices; remove it (or remove placement.devices to place the server "
        "by hand)"]
    env = _load(node, _role("a", 8090, ", placement: {devices: {count: 1}}" + extra))
    assert [str(p) for p in env.problems] == [
        "m.yaml:18: $.spec.env.CUDA_DEVICE_ORDER: CUDA_DEVICE_ORDER is set by the planner from "
        "spec.placement.devices; remove it"]
    off = _load(node, _role("a", 8090, extra, args=args))
    assert off.ok, off.problems
