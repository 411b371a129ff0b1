"""§12 instances end to end with the real (CPU) llama-server: three instances of one role.

No GPU here: the node declares three CUDA devices (with no discovery tool on the
machine the declaration is trusted), so each instance gets its own
``CUDA_VISIBLE_DEVICES``. Checked with real servers: instance names, ports and
directories; `logs chat/1`; `status` grouping; scale 3 → 2 → 3 stopping and
starting exactly the highest instance; a rolling update (``restarted_at``)
restarting one instance at a time while the others serve; kill -9 of `watch` in
the middle of a rollout, and every instance re-adopted from its marker when the
state store is gone.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from reconciler.core.ownership import MARKER_ENV
from tests.e2e.conftest import PORT_RANGE, wait_for
from tests.e2e.test_once import converge, ready
from tests.support import roles

pytestmark = pytest.mark.e2e

DEVICES = """\
  devices:
            - {id: "cuda:0", kind: cuda, memory: 1.5GB}
            - {id: "cuda:1", kind: cuda, memory: 1.5GB}
            - {id: "cuda:2", kind: cuda, memory: 1.5GB}"""
NAMES = ("chat", "chat/1", "chat/2")


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive free ports of the e2e range."""
    start = PORT_RANGE[0] + (hash(time.time()) % 5000)
    for base in range(start, PORT_RANGE[1] - n):
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise AssertionError("no free run of ports")


def _role(world, port: int, replicas: int, restarted_at: str | None = None,
          devices: bool = True) -> None:
    extra = {"restarted_at": f'"{restarted_at}"'} if restarted_at else {}
    if devices:
        extra["placement"] = "{devices: {count: 1}}"
    world.write("role-chat.yaml", roles.inference_spec(
        "chat", port, replicas=str(replicas), memory="{weights: 1GB}", **extra))


def _roll(world, port: int, restarted_at: str) -> list[str]:
    """Plain passes until every instance runs ``restarted_at`` and answers: the instances
    restarted, in order; never more than one restart in a pass, never two instances away."""
    order: list[str] = []
    for _ in range(30):
        pids = _pids(world)
        out = converge(world)
        plan = out.stdout.split("Plan:")[0]
        restarted = [n for n in NAMES if f"~ restart {n} " in plan]
        assert len(restarted) <= 1, out.stdout
        order += restarted
        serving = [n for i, n in enumerate(NAMES) if ready(port + i, timeout=0.5)]
        assert len(serving) >= 2, (serving, out.stdout)
        if restarted:
            assert pids[restarted[0]] != world.pid(restarted[0])
            assert wait_for(lambda: ready(port + NAMES.index(restarted[0]), 0.2), 30)
        elif all(world.record(n).restarted_at == restarted_at for n in NAMES):
            return order
        else:
            time.sleep(0.3)
    raise AssertionError(f"the rollout did not finish: {order}")


def _pids(world) -> dict[str, int | None]:
    return {name: world.pid(name) for name in NAMES}


def _servers(world, marker: str) -> list[int]:
    return [p.pid for p in world.processes() if p.environ().get(MARKER_ENV) == marker]


def test_three_instances_scale_roll_and_readopt(world):
    """§12 against real servers: three instances on three ports and devices; scale 3 → 2 → 3
    touches only chat/2; a rolling update restarts one instance per pass, the others serving;
    kill -9 of watch mid-rollout leaves one server per instance; all re-adopted."""
    port = _free_run(3)
    world.node(extra=DEVICES)
    world.model()
    _role(world, port, 3)

    out = converge(world)
    for i, name in enumerate(NAMES):
        assert f"+ start {name} :{port + i} on cuda:{i} (missing)" in out.stdout, out.stdout
    for i, name in enumerate(NAMES):
        assert ready(port + i), name
        record = world.record(name)
        assert record.port == port + i and "/" not in record.instance_id
        assert psutil.Process(record.pid).environ()["CUDA_VISIBLE_DEVICES"] == str(i)
        assert _servers(world, record.instance_id) == [record.pid]
    assert len({world.record(n).instance_id for n in NAMES}) == 3

    logs = world.reconcile("logs", "chat/1")
    assert logs.returncode == 0 and logs.stdout, logs.stderr
    status = world.reconcile("status")
    assert status.returncode == 0 and "3 instances" in status.stdout, status.stdout
    assert "  chat/1" in status.stdout, status.stdout

    # Scale 3 → 2: chat/2 (the highest) stops; nothing else moves.
    before = _pids(world)
    _role(world, port, 2)
    out = converge(world)
    assert f"- stop chat/2 :{port + 2} (scale_down: replicas 3 → 2)" in out.stdout, out.stdout
    assert "restart" not in out.stdout.split("Plan:")[0], out.stdout
    assert world.pid("chat") == before["chat"] and world.pid("chat/1") == before["chat/1"]
    assert not psutil.pid_exists(before["chat/2"]) or \
        psutil.Process(before["chat/2"]).status() == psutil.STATUS_ZOMBIE
    # … and 2 → 3: chat/2 starts again, on the device it left.
    _role(world, port, 3)
    out = converge(world)
    assert f"+ start chat/2 :{port + 2} on cuda:2 (scale_up: replicas 2 → 3)" in out.stdout, \
        out.stdout
    assert world.pid("chat") == before["chat"] and world.pid("chat/1") == before["chat/1"]
    assert ready(port + 2)

    # Rolling update: one instance per pass, the next once the restarted one answers.
    _role(world, port, 3, restarted_at="1")
    assert _roll(world, port, "1") == list(NAMES)

    # kill -9 of watch in the middle of a rollout; then every instance re-adopted.
    _role(world, port, 3, restarted_at="2")
    with open(world.root / "watch.log", "w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(world.manifests), "--state-dir",
             str(world.state), "watch", "--resync", "60"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        assert wait_for(lambda: (world.record("chat") or None) is not None
                        and world.record("chat").restarted_at == "2", 60), \
            (world.root / "watch.log").read_text()[-2000:]
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
    rest = _roll(world, port, "2")  # plain passes finish the rollout, one at a time
    assert "chat" not in rest and len(rest) == 2, rest
    for name in NAMES:
        record = world.record(name)
        assert _servers(world, record.instance_id) == [record.pid], name
    # Re-adoption by marker, the state store gone: every instance taken back on its devices.
    pids = _pids(world)
    devices = {name: world.record(name).devices for name in NAMES}
    assert sorted(devices.values()) == [(("cuda:0", 10**9),), (("cuda:1", 10**9),),
                                        (("cuda:2", 10**9),)], devices
    db = world.state / "state.db"
    for sidecar in ("state.db-wal", "state.db-shm"):
        (world.state / sidecar).unlink(missing_ok=True)
    db.rename(world.state / "state.db.lost")
    out = converge(world)
    assert "start" not in out.stdout.split("Plan:")[0], out.stdout
    assert _pids(world) == pids, out.stdout
    for name in NAMES:
        assert f"= keep {name} " in out.stdout, out.stdout
        assert world.record(name).devices == devices[name], name
    assert "No changes" in converge(world).stdout
