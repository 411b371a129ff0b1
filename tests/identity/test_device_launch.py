"""A launch follows the device assignment (§7.1): visibility variable, --tensor-split, digest."""

from __future__ import annotations

from reconciler.core.decisions import PlanContext, Verb
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSpec,
    NodeConfig,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.devices import Assignment, Device, DeviceKind, DeviceRequest
from reconciler.core.observed import Observed, Remembered
from reconciler.planner import identity
from reconciler.planner.plan import plan
from reconciler.planner.launches import device_env

GB = 10**9
MODEL = ModelSpec(name="q", format=ModelFormat.GGUF, root="/m",
                  shards=(ModelFile(path="q.gguf", sha256="0" * 64, size=GB),))
NODE = NodeConfig(serve_programs=((Runtime.LLAMACPP, "/opt/llama-server"),),
                  env=(("CUDA_VISIBLE_DEVICES", "0,1,2,3"),),
                  devices=(Device(id="cuda:0", kind=DeviceKind.CUDA, memory=24 * GB),
                           Device(id="cuda:1", kind=DeviceKind.CUDA, memory=24 * GB),
                           Device(id="rocm:0", kind=DeviceKind.ROCM, memory=24 * GB)))
ENVIRON = {"PATH": "/usr/bin", "HOME": "/root"}


def _role(devices: DeviceRequest | None, name: str = "coder") -> RoleSpec:
    return RoleSpec(name=name, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="q",
                    serve=ServeSpec(port=8090), memory=MemorySpec(weights=16 * GB),
                    devices=devices)


def _launch(role: RoleSpec, assignment: Assignment):
    launcher = identity.Launcher(NODE, ENVIRON, "/srv")
    argv = launcher.argv(role, {"q": MODEL}, assignment)
    return launcher.launch(argv, identity.instance_id(role), None,
                           device_env(role.runtime, assignment))


def test_one_cuda_device_sets_its_index_and_no_split() -> None:
    """§7.1 one CUDA device: ``CUDA_VISIBLE_DEVICES`` is its index (the planner's, over NodeConfig
    env) and no ``--tensor-split``."""
    launch = _launch(_role(DeviceRequest(count=1)), Assignment(ids=("cuda:1",)))
    env = dict(launch.env)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # the planner's, over NodeConfig env's
    assert "--tensor-split" not in launch.argv


def test_several_devices_split_by_the_request() -> None:
    """§7.1 several devices: all visible, ``--tensor-split`` as requested, even when no split is
    given."""
    role = _role(DeviceRequest(ids=("cuda:0", "cuda:1"), split=(3.0, 1.0)))
    launch = _launch(role, Assignment(ids=("cuda:0", "cuda:1"), split=(3.0, 1.0)))
    assert dict(launch.env)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert launch.argv[-2:] == ("--tensor-split", "3,1")
    even = _launch(role, Assignment(ids=("cuda:0", "cuda:1")))
    assert even.argv[-2:] == ("--tensor-split", "1,1")


def test_rocm_uses_hip_visible_devices() -> None:
    """§7.1 a ROCm device is made visible with ``HIP_VISIBLE_DEVICES``."""
    launch = _launch(_role(DeviceRequest(ids=("rocm:0",))), Assignment(ids=("rocm:0",)))
    assert dict(launch.env)["HIP_VISIBLE_DEVICES"] == "0"


def test_the_digest_covers_the_devices_and_matches_the_canonical_text() -> None:
    """§6 the launch digest changes with the devices and is the sha256 of the canonical text."""
    role = _role(DeviceRequest(count=1))
    a, b = _launch(role, Assignment(ids=("cuda:0",))), _launch(role, Assignment(ids=("cuda:1",)))
    assert a.digest != b.digest
    import hashlib
    env = [(k, "<passed through>" if k in ("PATH", "HOME") else v) for k, v in a.env]
    text = identity.canonical(a.argv, env, a.cwd, None)
    assert hashlib.sha256(text.encode()).hexdigest() == a.digest


def test_a_host_only_role_launches_as_before() -> None:
    """§7.1 a role without devices launches exactly as with an empty assignment (nothing added)."""
    role = _role(None)
    assert identity.launch(role, {"q": MODEL}, NODE, ENVIRON, "/srv") == _launch(role, Assignment())


def test_the_planned_start_carries_the_assigned_devices_in_its_launch() -> None:
    """§7.1 the planned start's launch makes visible exactly the devices it was assigned (two roles,
    one device each)."""
    roles = (_role(DeviceRequest(count=1), "a"),
             attrs_port(_role(DeviceRequest(count=1), "b"), 8091))
    p = plan(Desired(roles=roles, models=(MODEL,), node=NODE), Observed(), Remembered(),
             PlanContext(environ=tuple(ENVIRON.items()), data_root="/srv"), 1000.0)
    seen = {}
    for d in p.decisions:
        assert d.verb is Verb.START
        seen[d.role] = (dict(d.launch.env)["CUDA_VISIBLE_DEVICES"], d.devices)
    assert seen == {"a": ("0", (("cuda:0", 16 * GB),)), "b": ("1", (("cuda:1", 16 * GB),))}


def attrs_port(role: RoleSpec, port: int) -> RoleSpec:
    import attrs
    return attrs.evolve(role, serve=attrs.evolve(role.serve, port=port))


def test_a_launch_built_for_the_old_device_follows_the_one_placement_picked() -> None:
    """Its old device taken, a count role starts elsewhere: env, digest and generation all say so."""
    from tests.plan import golden

    (step,) = golden.steps(golden.load_all()["devices-old-device-taken"], "x")
    d = plan(step.desired, step.observed, step.remembered, step.ctx, step.now).decision("x")
    assert d.devices == (("cuda:1", 10 * GB),)
    assert dict(d.launch.env)["CUDA_VISIBLE_DEVICES"] == "1"
    assert d.generation == d.launch.digest  # what the next pass computes from the record
