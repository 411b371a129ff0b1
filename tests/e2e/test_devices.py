"""§7.1 devices end to end with the real (CPU) llama-server: the planner places, the launch follows.

No GPU here: the node declares two CUDA devices, and with no discovery tool
on the machine the declaration is trusted. What is checked is what the
reconciler does with them: which roles start, on which device, with which
``CUDA_VISIBLE_DEVICES`` in the running server's /proc/PID/environ and which
argv; the role that fits no device is refused naming the devices; a freed
device takes the refused role; a changed ``ids`` restarts exactly that role.
"""

from __future__ import annotations

import json

import psutil
import pytest

from tests.e2e.conftest import free_port
from tests.e2e.test_once import alive, converge, ready
from tests.support import roles

pytestmark = pytest.mark.e2e

DEVICES = """\
  devices:
            - {id: "cuda:0", kind: cuda, memory: 1.5GB}
            - {id: "cuda:1", kind: cuda, memory: 1.5GB}"""


def _role(world, name: str, port: int, devices: str, *, state: str = "running",
          weights: str = "1GB") -> None:
    world.write(f"role-{name}.yaml", roles.inference_spec(
        name, port, state=state, memory=f"{{weights: {weights}}}", placement=f"{{devices: {devices}}}"))


def _env(world, name: str) -> dict[str, str]:
    return psutil.Process(world.pid(name)).environ()


def _argv(world, name: str) -> list[str]:
    return psutil.Process(world.pid(name)).cmdline()


def test_two_devices_three_roles_freed_device_and_changed_ids(world):
    # Claims are placed in port order: a, b, c.
    """§7.1 against real servers: three count roles on two devices (the third refused, nothing
    moves in sync), a stop frees a device the refused role takes, and changed ids restart only
    the role they move."""
    ports = dict(zip(("a", "b", "c"), sorted({free_port() for _ in range(3)})))
    assert len(ports) == 3
    world.node(extra=DEVICES)
    world.model()
    for name in ("a", "b", "c"):
        _role(world, name, ports[name], "{count: 1}")

    out = converge(world, expect=3)  # c needs an operator: it fits no device
    assert f"+ start a :{ports['a']} on cuda:0 (missing)" in out.stdout, out.stdout
    assert f"+ start b :{ports['b']} on cuda:1 (missing)" in out.stdout, out.stdout
    assert (f"! refuse c :{ports['c']} (unplaceable: c needs 1.0 GB: cuda:0 has 500.0 MB free "
            "(held by a 1.0 GB); cuda:1 has 500.0 MB free (held by b 1.0 GB))") in out.stdout, \
        out.stdout
    assert ready(ports["a"]) and ready(ports["b"])
    for name, index in (("a", "0"), ("b", "1")):
        env = _env(world, name)
        assert env["CUDA_VISIBLE_DEVICES"] == index and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        argv = _argv(world, name)
        assert "--tensor-split" not in argv and argv[argv.index("--port") + 1] == str(ports[name])
        assert world.record(name).devices == ((f"cuda:{index}", 10**9),)
    assert world.pid("c") is None
    status = world.reconcile("status")
    assert "unplaceable" in status.stdout
    assert "cuda:0   1.0 GB / 1.5 GB reserved: a 1.0 GB" in status.stdout, status.stdout
    rows = json.loads(world.reconcile("status", "--json").stdout)["devices"]
    assert [(r["device"], r["reserved"], [h["role"] for h in r["holders"]]) for r in rows] == [
        ("cuda:0", 10**9, ["a"]), ("cuda:1", 10**9, ["b"])]

    a_pid, b_pid = world.pid("a"), world.pid("b")
    again = converge(world, expect=3)  # in sync: nothing moves, c still refused
    assert "to start" not in again.stdout or "0 to start" in again.stdout, again.stdout
    assert world.pid("a") == a_pid and world.pid("b") == b_pid

    # Stop a: the refused c starts on the device a freed, in the same pass.
    _role(world, "a", ports["a"], "{count: 1}", state="stopped")
    out = converge(world)
    assert f"- stop a :{ports['a']} (state_stopped" in out.stdout, out.stdout
    assert f"+ start c :{ports['c']} on cuda:0 (missing)" in out.stdout, out.stdout
    assert ready(ports["c"])
    assert _env(world, "c")["CUDA_VISIBLE_DEVICES"] == "0"
    assert world.pid("b") == b_pid and not alive(a_pid)

    # Naming the device b already runs on changes nothing.
    _role(world, "b", ports["b"], '{ids: ["cuda:1"]}')
    assert "No changes" in converge(world).stdout
    assert world.pid("b") == b_pid

    # c to ids [cuda:1] does not fit beside b; b to [cuda:0] neither. Stop c, then move b.
    _role(world, "c", ports["c"], "{count: 1}", state="stopped")
    converge(world)
    c_gone = world.record("c")
    assert c_gone is None or c_gone.pid is None
    _role(world, "b", ports["b"], '{ids: ["cuda:0"]}')
    out = converge(world)
    assert f"~ restart b :{ports['b']} on cuda:0 (spec_changed: devices cuda:1 → cuda:0)" \
        in out.stdout, out.stdout
    assert out.stdout.count("~ restart") == 1, out.stdout  # exactly that role
    assert ready(ports["b"])
    assert _env(world, "b")["CUDA_VISIBLE_DEVICES"] == "0" and world.pid("b") != b_pid
    assert "No changes" in converge(world).stdout


def test_a_role_on_two_devices_gets_both_and_its_tensor_split(world):
    """§7.1 against a real server: a role on two devices is started on both with its
    ``--tensor-split``."""
    port = free_port()
    world.node(extra=DEVICES)
    world.model()
    _role(world, "big", port, '{ids: ["cuda:0", "cuda:1"], split: [3, 1]}', weights="2GB")
    out = converge(world)
    assert f"+ start big :{port} on cuda:0, cuda:1 (missing)" in out.stdout, out.stdout
    assert ready(port)  # the CPU build takes the flag and serves
    argv = _argv(world, "big")
    assert argv[argv.index("--tensor-split") + 1] == "3,1"
    assert _env(world, "big")["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert world.record("big").devices == (("cuda:0", 1_500_000_000), ("cuda:1", 500_000_000))
    assert "No changes" in converge(world).stdout
