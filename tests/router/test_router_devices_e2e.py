"""§7.1 §9 on-demand roles swap per device through the router (real watch, real llama-server).

Two declared devices (no GPU here: the declaration is trusted, see
tests/e2e/test_devices.py). ``a`` and ``b`` want cuda:0, ``c`` wants cuda:1;
each device holds one of them. A request for ``b`` evicts ``a`` — the role on
the device it needs — and not ``c``, though ``c`` was used longer ago.
"""

from __future__ import annotations


import psutil
import pytest

from tests.e2e.conftest import free_port, wait_for
from tests.router.test_router_e2e import HI, kinds
from tests.watch.test_watch_e2e import alive
from tests.support import roles

pytestmark = pytest.mark.e2e


def _role(world, name: str, port: int, device: str) -> None:
    world.write(f"role-{name}.yaml", roles.inference_spec(
        name, port, state="on-demand", memory="{weights: 1GB}",
        placement=f'{{devices: {{ids: ["{device}"]}}}}'))


def test_a_request_evicts_only_the_role_on_the_device_it_needs(routed):
    """§9/§7.1 a request for a role evicts only an idle role on the device it needs, never one on
    another device."""
    world = routed.world
    world.node(extra=f"""  router: {{listen: "127.0.0.1:{routed.router_port}"}}
          devices:
            - {{id: "cuda:0", memory: 1.5GB}}
            - {{id: "cuda:1", memory: 1.5GB}}""")
    world.model()
    wants = {"a": "cuda:0", "b": "cuda:0", "c": "cuda:1"}
    for name, device in wants.items():
        _role(world, name, free_port(), device)
    routed.start()
    client = routed.client()

    for name in ("c", "a"):  # c is the least recently used of the two running
        assert client.chat.completions.create(model=name, messages=HI,
                                              max_tokens=1).usage.completion_tokens == 1
    a_pid, c_pid = world.pid("a"), world.pid("c")
    assert alive(a_pid) and alive(c_pid)
    assert psutil.Process(c_pid).environ()["CUDA_VISIBLE_DEVICES"] == "1"

    answer = client.chat.completions.create(model="b", messages=HI, max_tokens=1)
    assert answer.usage.completion_tokens == 1
    assert psutil.Process(world.pid("b")).environ()["CUDA_VISIBLE_DEVICES"] == "0"
    # The answer may come before the pass that swapped has recorded it (§9: the router
    # releases the waiters the moment the new server answers).
    assert wait_for(lambda: kinds(world, "a", "stop"), 5)
    [stop] = kinds(world, "a", "stop")
    assert (stop.reason, stop.detail.split(";")[0]) == ("evicted", "for b"), stop
    assert not alive(a_pid)
    assert alive(c_pid) and world.pid("c") == c_pid and not kinds(world, "c", "stop")

    # And back: a evicts b, c stays.
    client.chat.completions.create(model="a", messages=HI, max_tokens=1)
    assert wait_for(lambda: [e.reason for e in kinds(world, "b", "stop")] == ["evicted"], 5)
    assert world.pid("c") == c_pid and alive(c_pid)
