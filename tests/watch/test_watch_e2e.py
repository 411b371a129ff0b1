"""``reconcile watch`` end to end: real llama.cpp servers, real signals, real pidfds."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import free_port, http_get, wait_for

pytestmark = pytest.mark.e2e

RESYNC = "60"  # far beyond every wait below: whatever converges did so without it


class WatchDaemon:
    """One ``reconcile watch`` process with its log in the world's directory."""

    def __init__(self, world, *args: str) -> None:
        self.log_path = world.root / f"watch-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(world.manifests),
             "--state-dir", str(world.state), "watch", "--resync", RESYNC,
             "--metrics-addr", "127.0.0.1:0", *args],
            stdout=subprocess.DEVNULL, stderr=self._log,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def json_line(self, **fields) -> dict | None:
        """The first JSON log line with these fields, its ``ts`` as unix time in ``at``."""
        for line in self.log.splitlines():
            entry = json.loads(line)
            if all(entry.get(k) == v for k, v in fields.items()):
                stamp = datetime.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
                entry["at"] = stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
                return entry
        return None

    def metrics(self) -> dict:
        found = wait_for(lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics",
                                           self.log), 10)
        assert found, self.log
        status, body = http_get(int(found.group(1)), "/metrics")
        assert status == 200, status
        return {f.name: f for f in text_string_to_metric_families(body.decode())}

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def daemons(world):
    started: list[WatchDaemon] = []

    def start(*args: str) -> WatchDaemon:
        started.append(WatchDaemon(world, *args))
        return started[-1]

    yield start
    for d in started:  # before the world's teardown kills its servers
        d.kill()


def ready(port: int, timeout: float = 20.0) -> bool:
    return bool(wait_for(lambda: http_get(port, "/health")[0] == 200, timeout))


def alive(pid: int | None) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def new_pid(world, name: str, old: int | None, timeout: float = 15.0) -> int | None:
    return wait_for(lambda: (p := world.pid(name)) not in (None, old) and alive(p) and p, timeout)


def events(world, role: str, after: float = 0.0):
    with world.store() as store:
        return [e for e in store.events(role) if e.at > after]


def value(fams: dict, name: str, **labels) -> float:
    """The sample with exactly these labels besides ``node`` (the world's NodeConfig name)."""
    return next(s.value for s in fams[name].samples
                if s.labels == {"node": "test-node", **labels})


def test_edit_converges_now_kill_is_noticed_and_restarted_after_backoff(world, daemons):
    """An edit restarts without the resync; kill -9 is seen within 0.5 s and restarted after base."""
    port = free_port()
    world.node(restart="{max_restarts: 5, base: 1s, cap: 8s, stable_after: 60s}",
               budget="1GiB")
    world.model()
    world.role("chat", port, ctx=256)
    daemon = daemons("--log-format", "json")
    assert ready(port), daemon.log
    first = world.pid("chat")

    edited = time.monotonic()
    world.role("chat", port, ctx=512)
    second = new_pid(world, "chat", first)
    assert second, daemon.log
    assert time.monotonic() - edited < 5.0
    assert ready(port)
    assert json.loads(http_get(port, "/props")[1])["default_generation_settings"]["n_ctx"] == 512
    assert not alive(first)

    # The pass that started it has ended (it waits for a new server to listen,
    # §5 after start, then records the restart) and put a pidfd on it.
    assert wait_for(lambda: any(e.kind == "restart" for e in events(world, "chat")), 5)
    time.sleep(0.2)
    killed = time.time()
    os.kill(second, signal.SIGKILL)
    woke = wait_for(lambda: daemon.json_line(event="exit", role="chat", pid=second), 5)
    assert woke, daemon.log
    assert woke["at"] - killed < 0.5, (woke, killed)
    backoff = wait_for(lambda: events(world, "chat", after=killed), 5)
    assert backoff and backoff[0].reason == "backoff", (backoff, daemon.log)
    third = new_pid(world, "chat", second)
    assert third, daemon.log
    # (its record is written at the spawn, its event when the pass ends)
    restart = wait_for(lambda: next(
        (e for e in events(world, "chat", after=killed) if e.kind == "restart"), None), 5)
    assert restart, daemon.log
    assert 1.0 <= restart.at - woke["at"] < 2.5, (restart, woke)
    assert ready(port)

    def running_metrics():
        fams = daemon.metrics()
        ok = value(fams, "reconciler_role_status", role="chat", status="running") == 1
        return ok and fams

    fams = wait_for(running_metrics, 10)
    assert fams, daemon.log
    assert value(fams, "reconciler_role_restarts", role="chat") == 1
    assert value(fams, "reconciler_reserved_bytes", role="chat") > 0
    assert value(fams, "reconciler_memory_budget_bytes") == 1024 ** 3
    assert value(fams, "reconciler_manifest_problems") == 0
    assert value(fams, "reconciler_last_pass_timestamp_seconds") > killed
    assert value(fams, "reconciler_last_pass_duration_seconds") > 0
    assert value(fams, "reconciler_probe_latency_seconds", role="chat") > 0
    assert daemon.stop() == 0


def test_bad_edit_changes_nothing_and_the_fix_converges(world, daemons):
    """An invalid edit keeps the server and logs file:line; fixing the file resumes."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port, ctx=256)
    daemon = daemons()
    assert ready(port), daemon.log
    pid = world.pid("chat")

    broke = time.time()
    world.write("role-chat.yaml", "apiVersion: reconciler/v1\nkind: InferenceSpec\n"
                "metadata: {name: chat}\nspec:\n  runtime: llamacpp\n  mode: managed\n"
                "  model: tiny\n  serve: {port: 99999, ctx: 512}\n")
    invalid = wait_for(lambda: [e for e in events(world, "manifests", after=broke)
                                if e.kind == "invalid"], 5)
    assert invalid, daemon.log
    assert re.search(r"role-chat\.yaml:\d+: \$\.spec\.serve\.port", daemon.log), daemon.log
    assert wait_for(lambda: value(daemon.metrics(), "reconciler_manifest_problems") >= 1, 5)
    assert world.pid("chat") == pid and alive(pid)

    world.role("chat", port, ctx=512)
    fixed = new_pid(world, "chat", pid)
    assert fixed, daemon.log
    # The pid is recorded mid-pass (right after the spawn), "valid" once the pass is done.
    assert wait_for(lambda: [e.kind for e in events(world, "manifests", after=broke)]
                    == ["invalid", "valid"], 5), daemon.log
    assert ready(port)
    assert json.loads(http_get(port, "/props")[1])["default_generation_settings"]["n_ctx"] == 512
    assert wait_for(lambda: value(daemon.metrics(), "reconciler_manifest_problems") == 0, 5)
    assert daemon.stop() == 0


def test_sigterm_leaves_servers_running_and_a_new_daemon_adopts_them(world, daemons):
    """SIGTERM exits 0 and leaves the server; the next daemon keeps it; --stop-on-exit stops it."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    first = daemons("--log-format", "json")
    assert ready(port), first.log
    pid = world.pid("chat")
    assert first.stop() == 0
    assert alive(pid) and http_get(port, "/health")[0] == 200
    lines = [json.loads(line) for line in first.log.splitlines()]
    assert any(line.get("role") == "chat" and line.get("verb") == "start"
               and line.get("reason") == "missing" and line.get("ok") for line in lines), lines

    second = daemons("--stop-on-exit")
    assert wait_for(lambda: " chat keep (in_sync)" in second.log, 10), second.log
    assert world.pid("chat") == pid and " chat start" not in second.log
    assert second.stop(signal.SIGINT) == 0
    assert wait_for(lambda: not alive(pid), 10)
    assert http_get(port, "/health")[0] == 0


def test_second_daemon_exits_1_while_the_lock_is_held(world, daemons):
    """The lock is held for the daemon's life: a second one exits 1 saying who holds it."""
    world.node()
    world.model()
    first = daemons()
    assert wait_for(lambda: "watch started" in first.log, 10), first.log
    second = daemons()
    assert second.proc.wait(10) == 1
    assert "another reconciler holds" in second.log
    assert first.proc.poll() is None
    assert first.stop() == 0
