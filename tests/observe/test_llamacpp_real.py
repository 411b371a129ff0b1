"""The observer against the REAL llama.cpp server (testbed: xllamacpp behind a llama-server shim)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from reconciler.commands.health import deep_check
from reconciler.identity import MARKER_ENV, instance_id
from reconciler.model import (
    Desired,
    Health,
    Mode,
    Remembered,
    RoleRecord,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.observe import observe

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA_SERVER = TESTBED / "bin" / "llama-server"
TINY_GGUF = TESTBED / "models" / "tiny.gguf"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (LLAMA_SERVER.exists() and TINY_GGUF.exists()),
        reason=f"SKIPPED: real llama.cpp testbed missing ({LLAMA_SERVER}, {TINY_GGUF}); "
        "run `bash testbed/setup.sh`",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server() -> Iterator[tuple[RoleSpec, RoleRecord, subprocess.Popen]]:
    """A real llama-server (alias tiny) launched with our marker, as the executor would."""
    port = _free_port()
    spec = RoleSpec(name="tiny", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                    serve=ServeSpec(port=port))
    marker = instance_id(spec)
    argv = [str(LLAMA_SERVER), "--model", str(TINY_GGUF), "--host", "127.0.0.1",
            "--port", str(port), "--ctx-size", "256", "--alias", "tiny"]
    proc = subprocess.Popen(
        argv, env={"PATH": "/usr/bin:/bin", MARKER_ENV: marker}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    record = RoleRecord(
        name="tiny", instance_id=marker, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
        port=port, pid=proc.pid, create_time=psutil.Process(proc.pid).create_time(),
        launch_argv=tuple(argv), started_at=time.time(),
    )
    try:
        yield spec, record, proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def test_real_llamacpp_transitions_identity_and_deep_health(server) -> None:  # type: ignore[no-untyped-def]
    """refused → (503 loading) → 200; alias listed, /props model_path, owned, one-token deep health."""
    spec, record, proc = server
    desired = Desired(roles=(spec,))
    remembered = Remembered(roles=(record,))
    seen: list[tuple[Health, str]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        role = observe(desired, remembered, probe_timeout=1.0).role("tiny")
        step = (role.probe.health, role.probe.detail)
        if not seen or seen[-1] != step:
            seen.append(step)
        if role.probe.health is Health.UP:
            break
        assert proc.poll() is None, f"llama-server exited {proc.returncode}: {seen}"
        time.sleep(0.01)
    healths = [h for h, _ in seen]
    assert healths[0] is Health.UNREACHABLE, seen
    assert seen[0][1] == "starting: not listening yet (connection refused)"
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
    assert f"127.0.0.1:{spec.serve.port}" in role.process.listen
    assert role.exposed == () and role.port_taken is False

    verdict = deep_check(spec, desired)
    assert verdict.ok, verdict.detail
    assert "(1 token)" in verdict.detail


def test_real_llamacpp_wrong_alias_is_degraded(server) -> None:  # type: ignore[no-untyped-def]
    """The real server lists only its alias: a role wanting another model reads unhealthy."""
    spec, record, _ = server
    other = RoleSpec(name="other", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED, model="coder",
                     serve=spec.serve)
    desired = Desired(roles=(other,))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = observe(desired, Remembered(), probe_timeout=1.0).role("other").probe
        if probe.health not in (Health.UNREACHABLE, Health.LOADING):
            break
        time.sleep(0.02)
    assert probe.health is Health.UNHEALTHY
    assert probe.detail == "model coder is not listed by the server"
