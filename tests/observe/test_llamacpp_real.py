"""The observer against the REAL llama.cpp server (testbed: llama-server compiled from source)."""

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

from reconciler.commands.health import deep_check
from reconciler.core.ownership import MARKER_ENV
from reconciler.planner.identity import instance_id
from reconciler.core.desired import Desired, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import Health, Remembered, RoleRecord
from reconciler.core.observed import ServerProcess, flat_record
from reconciler.world.observe import observe

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA_SERVER = TESTBED / "bin" / "llama-server"
TINY_GGUF = TESTBED / "models" / "tiny.gguf"

pytestmark = [
    pytest.mark.e2e,
    # In CI a missing testbed is a broken build: the tests run and fail, never skip.
    pytest.mark.skipif(
        not os.environ.get("CI") and not (LLAMA_SERVER.exists() and TINY_GGUF.exists()),
        reason=f"SKIPPED: real llama.cpp testbed missing ({LLAMA_SERVER}, {TINY_GGUF}); "
        "run `bash testbed/setup.sh`",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launcher:
    """Launches a real llama-server (alias tiny) with our marker, as the executor would."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.spec = RoleSpec(name="tiny", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
                             model="tiny", serve=ServeSpec(port=self.port))
        self.marker = instance_id(self.spec)
        self.argv = [str(LLAMA_SERVER), "--model", str(TINY_GGUF), "--host", "127.0.0.1",
                     "--port", str(self.port), "--ctx-size", "256", "--alias", "tiny"]
        self.proc: subprocess.Popen | None = None
        # Started but not yet spawned: what the store says right before the spawn.
        self.record = flat_record(
            name="tiny", instance_id=self.marker, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
            port=self.port, launch_argv=tuple(self.argv), started_at=time.time(),
        )

    def launch(self) -> subprocess.Popen:
        self.proc = subprocess.Popen(
            self.argv, env={"PATH": "/usr/bin:/bin", MARKER_ENV: self.marker},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.record = attrs.evolve(
            self.record, process=ServerProcess(
                pid=self.proc.pid, create_time=psutil.Process(self.proc.pid).create_time()),
        )
        return self.proc

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    made = Launcher()
    try:
        yield made
    finally:
        made.close()


def _until_answering(desired: Desired, remembered: Remembered, name: str, proc, seen: list):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        role = observe(desired, remembered, probe_timeout=1.0).role(name)
        step = (role.probe.health, role.probe.detail)
        if not seen or seen[-1] != step:
            seen.append(step)
        if role.probe.health not in (Health.UNREACHABLE, Health.LOADING):
            return role
        assert proc.poll() is None, f"llama-server exited {proc.returncode}: {seen}"
        time.sleep(0.005)
    raise AssertionError(f"never answered: {seen}")


def test_real_llamacpp_transitions_identity_and_deep_health(launcher: Launcher) -> None:
    """refused → (503 loading) → 200; alias listed, /props model_path, owned, one-token deep health."""
    desired = Desired(roles=(launcher.spec,))
    # Right before the spawn: the real port refuses, and the role reads as starting.
    first = observe(desired, Remembered(roles=(launcher.record,)), probe_timeout=1.0).role("tiny")
    seen = [(first.probe.health, first.probe.detail)]
    proc = launcher.launch()
    role = _until_answering(desired, Remembered(roles=(launcher.record,)), "tiny", proc, seen)

    healths = [h for h, _ in seen]
    assert seen[0] == (Health.UNREACHABLE, "starting: not listening yet (connection refused)")
    assert healths[-1] is Health.UP, seen
    order = [Health.UNREACHABLE, Health.LOADING, Health.UP]
    assert [order.index(h) for h in healths] == sorted(order.index(h) for h in healths), seen
    for health, detail in seen:
        if health is Health.LOADING:
            assert detail == "loading model"

    probe = role.probe
    assert "tiny" in probe.listed_models
    assert probe.identity == str(TINY_GGUF)
    assert probe.detail == "healthy; serving tiny"
    assert role.process is not None and role.process.owned and role.process.alive
    assert f"127.0.0.1:{launcher.port}" in role.process.listen
    assert role.exposed == () and role.port_taken is False

    verdict = deep_check(launcher.spec, desired)
    assert verdict.ok, verdict.detail
    assert "(1 token)" in verdict.detail


def test_real_llamacpp_wrong_alias_is_degraded(launcher: Launcher) -> None:
    """The real server lists only its alias: a role wanting another model reads unhealthy."""
    proc = launcher.launch()
    other = RoleSpec(name="other", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED, model="coder",
                     serve=launcher.spec.serve)
    role = _until_answering(Desired(roles=(other,)), Remembered(), "other", proc, [])
    assert role.probe.health is Health.UNHEALTHY
    assert role.probe.detail == "model coder is not listed by the server"


def test_real_llamacpp_settled_identity_is_what_the_server_says(launcher: Launcher) -> None:
    """Once our server answered healthy, its launch gives the same facts /v1/models + /props gave."""
    desired = Desired(roles=(launcher.spec,))
    proc = launcher.launch()
    asked = _until_answering(desired, Remembered(roles=(launcher.record,)), "tiny", proc, [])
    settled_record = attrs.evolve(launcher.record, healthy_since=time.time())
    settled = observe(desired, Remembered(roles=(settled_record,)), probe_timeout=1.0).role("tiny")
    assert asked.probe.health is Health.UP and settled.probe.health is Health.UP
    assert (settled.probe.listed_models, settled.probe.identity, settled.probe.detail) == (
        asked.probe.listed_models, asked.probe.identity, asked.probe.detail)
