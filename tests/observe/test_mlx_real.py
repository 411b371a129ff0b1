"""The observer against a REAL mlx_lm.server (MLX CPU backend, tiny offline model)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import attrs
import psutil
import pytest

from reconciler.world import probe
from reconciler.core.ownership import MARKER_ENV
from reconciler.core.desired import Desired, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import Health, Remembered, RoleRecord
from reconciler.core.observed import flat_record
from reconciler.world.observe import observe
from reconciler.runtimes import mlx_lm

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
MLX_SERVER = TESTBED / "bin" / "mlx_lm.server"
TINY_MLX = TESTBED / "models" / "tiny-mlx"

pytestmark = [
    pytest.mark.mlx,
    # In CI a missing testbed is a broken build: the tests run and fail, never skip.
    pytest.mark.skipif(
        not os.environ.get("CI") and not (MLX_SERVER.exists() and TINY_MLX.exists()),
        reason=f"SKIPPED: real mlx-lm testbed missing ({MLX_SERVER}, {TINY_MLX}); "
        "run `bash testbed/setup_mlx.sh`",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mlx:
    """A real mlx_lm.server launched with our marker; stderr kept in a file."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.spec = RoleSpec(name="voice", runtime=Runtime.MLX_LM, mode=Mode.MANAGED,
                             model="tiny-mlx", serve=ServeSpec(port=port))
        self.argv = [str(MLX_SERVER), "--model", str(TINY_MLX), "--host", "127.0.0.1",
                     "--port", str(port)]
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv, env={"PATH": "/usr/bin:/bin", MARKER_ENV: "voice-0000abcd",
                                "HOME": str(log.parent)},
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True,
            )
        self.record = flat_record(
            name="voice", instance_id="voice-0000abcd", runtime=Runtime.MLX_LM,
            mode=Mode.MANAGED, port=port, pid=self.proc.pid,
            create_time=psutil.Process(self.proc.pid).create_time(),
            launch_argv=tuple(self.argv), started_at=time.time(),
        )

    def observe(self, record: RoleRecord | None = None):  # type: ignore[no-untyped-def]
        remembered = Remembered(roles=(record or self.record,))
        return observe(Desired(roles=(self.spec,)), remembered, probe_timeout=2.0).role("voice")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator:
    made: list[Mlx] = []

    def start(port: int) -> Mlx:
        server = Mlx(port, tmp_path / f"server-{len(made)}.log")
        made.append(server)
        return server

    yield start
    for server in made:
        server.close()


def test_real_mlx_readiness_is_the_first_completion(launch) -> None:  # type: ignore[no-untyped-def]
    """/health answers 200 no later than the model is ready; readiness = a one-token completion."""
    server = launch(_free_port())
    health_ok_at = ready_at = None
    deadline = time.monotonic() + 90
    role = None
    while time.monotonic() < deadline and ready_at is None:
        assert server.proc.poll() is None, server.log.read_text()[-2000:]
        answer = probe.send_sync("127.0.0.1", server.port, mlx_lm.HEALTH, timeout=1)
        if answer.status == 200 and health_ok_at is None:
            health_ok_at = time.monotonic()
        if health_ok_at is not None:
            role = server.observe()
            if role.probe.health is Health.UP:
                ready_at = time.monotonic()
        time.sleep(0.05)
    assert health_ok_at is not None and ready_at is not None, server.log.read_text()[-2000:]
    assert health_ok_at <= ready_at
    assert role is not None
    assert role.probe.detail == "ready: answered a one-token completion"
    assert role.probe.identity == str(TINY_MLX)  # identity from the launched argv
    assert role.process is not None and role.process.owned
    assert role.port_taken is False and role.exposed == ()

    # Once healthy, only /health is asked, and it is up.
    healthy = server.observe(attrs.evolve(server.record, healthy_since=time.time()))
    assert healthy.probe.health is Health.UP and healthy.probe.detail == "healthy"


def test_real_mlx_taken_port_does_not_exit(launch) -> None:  # type: ignore[no-untyped-def]
    """Port already taken: mlx_lm.server stays alive; the observer sees our process not on it."""
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen(8)
        port = foreign.getsockname()[1]
        server = launch(port)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and b"already in use" not in server.log.read_bytes():
            assert server.proc.poll() is None, server.log.read_text()[-2000:]
            time.sleep(0.1)
        assert b"already in use" in server.log.read_bytes()
        time.sleep(0.5)
        assert server.proc.poll() is None  # it did not exit
        role = server.observe()
    assert role.process is not None and role.process.owned and role.process.alive
    assert all(not a.endswith(f":{port}") for a in role.process.listen)
    assert role.port_taken is True  # something not ours accepts on the port
