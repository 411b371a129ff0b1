"""Liveness (BEHAVIOUR §4.1) against the real llama-server: hung → restarted; busy → never.

Short periods (1 s) keep the tests quick; the timings measured are printed
(``-s``) for the report: SIGSTOP → the new server recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest

from tests.e2e.conftest import LLAMA_SERVER, NOBODY, TINY_GGUF, free_port, http_get, wait_for
from tests.support import roles

pytestmark = pytest.mark.e2e

PERIOD, FAILURES = 1.0, 2


def _role(world, name: str, port: int, *, mode: str = "managed", extra: str = '"--threads", "1"',
          timeout: str = "500ms", ctx: int = 512) -> None:
    world.write(f"role-{name}.yaml", roles.inference_spec(
        name, port, mode=mode, ctx=ctx, extra_args=f"[{extra}]",
        liveness=f"{{period: {PERIOD:g}s, timeout: {timeout}, failures: {FAILURES}, grace: 0s}}"))


def _watch(world) -> subprocess.Popen:
    with open(world.root / "watch.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(world.manifests), "--state-dir",
             str(world.state), "watch", "--resync", "60"],
            stdout=subprocess.DEVNULL, stderr=log)


def _stop(daemon: subprocess.Popen) -> None:
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(30)


def _status(world, name: str) -> dict:
    out = world.reconcile("status", name, "--json")
    return json.loads(out.stdout)["roles"][0]


def _state(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"


def test_a_sigstopped_server_is_restarted_within_failures_periods(world):
    """SIGSTOP → unresponsive → restarted (counted) within failures × period + one pass."""
    port = free_port()
    world.node(restart="{max_restarts: 3, base: 1s, cap: 8s, stable_after: 60s}")
    world.model()
    _role(world, "chat", port)
    daemon = _watch(world)
    try:
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        old = wait_for(lambda: world.pid("chat"), 10)
        time.sleep(0.5)
        os.kill(old, signal.SIGSTOP)
        stopped = time.monotonic()
        new = wait_for(lambda: (p := world.pid("chat")) not in (None, old) and p, 30)
        took = time.monotonic() - stopped
        assert new, open(world.root / "watch.log").read()[-3000:]
        assert _state(old) == "gone"
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        with world.store() as store:
            restart = [e for e in store.events("chat") if "unresponsive" in e.detail
                       or "unresponsive" in str(e.reason)]
            assert world.record("chat").restarts == 1
        assert restart, "no unresponsive event"
        # failures × period, plus the timeouts, one pass and the stop's grace (1 s: a
        # stopped process gets SIGTERM only when continued; the SIGKILL ends it).
        budget = FAILURES * PERIOD + FAILURES * 0.5 + 1.0 + 1.0 + 2.0
        print(f"\nSIGSTOP -> new server recorded: {took:.2f}s (period {PERIOD:g}s, "
              f"failures {FAILURES}, timeout 0.5s, stop_grace 1s; budget {budget:.1f}s)")
        assert took < budget, took
    finally:
        _stop(daemon)


def _generate(port: int, tokens: int, done: list, seconds: float | None = None) -> None:
    """Stream a generation of ``tokens``; stop reading (the connection closed) after ``seconds``."""
    body = json.dumps({"prompt": "once upon a time", "n_predict": tokens, "ignore_eos": True,
                       "stream": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.monotonic()
    with opener.open(request, timeout=120) as answer:
        for _ in answer:
            if seconds is not None and time.monotonic() - started > seconds:
                break
    done.append(time.monotonic() - started)


def test_a_busy_server_making_progress_is_never_restarted(world):
    """A long streaming generation while the daemon checks every second: same pid throughout
    (the stream is read for 4 periods × failures + 4 s, then let go: long enough for a detector
    that would fire to have fired)."""
    port = free_port()
    world.node()
    world.model()
    _role(world, "chat", port, extra='"--threads", "1", "--metrics", "--context-shift"',
          timeout="2s")
    daemon = _watch(world)
    try:
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        pid = world.pid("chat")
        done: list = []
        busy = 4 * PERIOD * FAILURES + 4
        run = threading.Thread(target=_generate, args=(port, 30000, done, busy))
        run.start()
        run.join(120)
        assert len(done) == 1, done
        print(f"\nbusy for {done[0]:.1f}s under checks every {PERIOD:g}s")
        assert done[0] > 4 * PERIOD * FAILURES  # long enough for the detector to have fired
        assert world.pid("chat") == pid and _state(pid) != "gone"
        record = world.record("chat")
        assert record.restarts == 0 and record.liveness.failures == 0
        # The no-progress detector was in play: /metrics was read every pass.
        assert record.liveness.decoded is not None and record.liveness.decoded > 1000
        with world.store() as store:
            assert not [e for e in store.events("chat") if "unresponsive" in e.detail]
    finally:
        _stop(daemon)


def test_an_adopted_sigstopped_server_is_reported_never_signalled(world):
    """Adopted and hung: `degraded: unresponsive …` in status; the process stays stopped."""
    port = free_port()
    world.node()
    world.model()
    server = subprocess.Popen(
        [str(LLAMA_SERVER), "--model", str(TINY_GGUF), "--host", "127.0.0.1", "--port", str(port),
         "--ctx-size", "512", "--threads", "1"],
        cwd=world.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, user=NOBODY if os.getuid() == 0 else None)
    try:
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        _role(world, "theirs", port, mode="adopted")
        assert world.reconcile("--once").returncode == 0
        server.send_signal(signal.SIGSTOP)
        details = []
        for _ in range(FAILURES + 1):
            time.sleep(PERIOD)
            world.reconcile("--once")
            details.append(_status(world, "theirs"))
        row = details[-1]
        assert row["status"] == "degraded", details
        assert row["detail"].startswith("unresponsive: no answer to GET /health within 0.5s"), row
        assert row["detail"].endswith("adopted: reported, never restarted"), row
        assert _state(server.pid) == psutil.STATUS_STOPPED and server.poll() is None
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(10)
