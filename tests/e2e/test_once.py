"""``reconcile --once`` end to end: real llama.cpp servers, real signals, real SQLite."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import NOBODY, free_port, http_get, wait_for

pytestmark = pytest.mark.e2e


def converge(world, *args: str, expect: int = 0, env: dict | None = None
             ) -> subprocess.CompletedProcess:
    out = world.reconcile("--once", *args, env=env)
    assert out.returncode == expect, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def ready(port: int, timeout: float = 15.0) -> bool:
    return bool(wait_for(lambda: http_get(port, "/health")[0] == 200, timeout))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(exist_ok=True)
    os.chmod(path.parent, 0o755)
    path.write_text(textwrap.dedent(text))
    os.chmod(path, 0o755)
    return path


def test_start_then_nothing_to_do(world):
    """A wanted role is started for real; a second pass plans and does nothing."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    out = converge(world)
    assert f"+ start chat :{port} (missing)" in out.stdout
    assert ready(port)
    status, body = http_get(port, "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"
    pid = world.pid("chat")
    assert pid and alive(pid)

    again = converge(world)
    assert "No changes" in again.stdout, again.stdout
    assert world.pid("chat") == pid
    plan = world.reconcile("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout

    status_out = world.reconcile("status", "--json")
    row = json.loads(status_out.stdout)["roles"][0]
    assert row["status"] == "running" and row["pid"] == pid


def test_child_runs_unprivileged_with_exactly_the_section_6_environment(world):
    """The server runs as the run_as uid with a cleared env, PATH, passthrough and the marker."""
    port = free_port()
    world.node(extra="  env: {LLAMA_ARG_LOG_COLORS: 'off'}\n          env_passthrough: [HOME]")
    world.model()
    world.role("chat", port)
    converge(world, env={"HOME": "/nonexistent-home", "SECRET_TOKEN": "leak"})
    assert ready(port)
    proc = psutil.Process(world.pid("chat"))
    env = proc.environ()
    record = world.record("chat")
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LLAMA_ARG_LOG_COLORS": "off",
        "HOME": "/nonexistent-home",
        "RECONCILER_INSTANCE": record.instance_id,
    }
    assert proc.uids().real == NOBODY and proc.gids().real == NOBODY
    status = Path(f"/proc/{proc.pid}/status").read_text()
    groups = next(line for line in status.splitlines() if line.startswith("Groups:"))
    assert groups.split(":")[1].strip() == ""
    assert os.getpgid(proc.pid) == proc.pid  # its own process group
    assert proc.cwd() == str(world.state / "instances" / record.instance_id)
    assert (Path(proc.cwd()) / "server.log").stat().st_size > 0  # stdout/stderr land there


def test_editing_ctx_restarts_exactly_once(world):
    """A launch change (ctx) restarts the server once, with the change in the reason."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port, ctx=256)
    converge(world)
    first = world.pid("chat")
    world.role("chat", port, ctx=512)
    out = converge(world)
    assert f"~ restart chat :{port} (spec_changed: ctx 256 → 512)" in out.stdout, out.stdout
    second = world.pid("chat")
    assert second != first and not alive(first)
    assert ready(port)
    assert json.loads(http_get(port, "/props")[1])["default_generation_settings"]["n_ctx"] == 512
    assert "No changes" in converge(world).stdout
    assert world.pid("chat") == second


def test_editing_the_port_moves_the_server(world):
    """A port edit (a new instance id) stops the old server by its own marker and starts anew."""
    old_port, new_port = free_port(), free_port()
    world.node()
    world.model()
    world.role("chat", old_port)
    converge(world)
    first = world.pid("chat")
    old_dir = world.state / "instances" / world.record("chat").instance_id
    assert ready(old_port) and old_dir.is_dir()
    world.role("chat", new_port)
    out = converge(world)
    assert f"~ restart chat :{new_port} (spec_changed: port {old_port} → {new_port})" in out.stdout
    assert not alive(first) and ready(new_port)
    assert http_get(old_port, "/health")[0] == 0
    assert "No changes" in converge(world).stdout
    # The old instance's directory does not leak; the new one's is in use.
    assert not old_dir.exists()
    assert (world.state / "instances" / world.record("chat").instance_id).is_dir()


def test_memory_only_edit_never_restarts(world):
    """Changing memory figures changes no launch: the server keeps its pid."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    converge(world)
    pid = world.pid("chat")
    world.role("chat", port, memory="memory: {kv: 1MiB}")
    out = converge(world)
    assert "restart" not in out.stdout.split("Plan:")[0].replace("= keep", "")
    assert world.pid("chat") == pid


def test_removing_a_role_stops_it_and_removes_its_directory(world):
    """A role removed from the manifests is stopped, forgotten, its directory deleted."""
    keep_port, gone_port = free_port(), free_port()
    world.node()
    world.model()
    world.role("keep", keep_port)
    world.role("gone", gone_port)
    converge(world)
    gone = world.record("gone")
    instance_dir = world.state / "instances" / gone.instance_id
    assert instance_dir.is_dir()
    world.remove("role-gone.yaml")
    out = converge(world)
    assert f"- stop gone :{gone_port} (removed)" in out.stdout, out.stdout
    assert not alive(gone.pid)
    assert not instance_dir.exists()
    assert world.record("gone") is None
    assert alive(world.pid("keep"))


def test_empty_manifest_set_stops_nothing_without_allow_empty(world):
    """Removing every role stops nothing unless --allow-empty is given."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    converge(world)
    pid = world.pid("chat")
    world.remove("role-chat.yaml")
    converge(world)
    assert alive(pid)
    converge(world, "--allow-empty")
    assert wait_for(lambda: not alive(pid), 5)


def test_invalid_manifest_edit_stops_nothing(world):
    """A broken edit exits 1 with file:line and leaves the running server alone."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    converge(world)
    pid = world.pid("chat")
    world.write("role-chat.yaml", "apiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {name: chat}\n"
                "spec: {runtime: llamacpp, mode: managed, model: tiny, serve: {port: 99999}}\n")
    out = converge(world, expect=1)
    assert "role-chat.yaml:" in out.stderr
    assert alive(pid) and world.pid("chat") == pid


def test_crash_backoff_restart_gave_up_then_operator_start(world):
    """kill -9 → backoff → restart → … → gave-up with the configured delays; start revives."""
    port = free_port()
    world.node(restart="{max_restarts: 2, base: 1s, cap: 8s, stable_after: 60s}")
    world.model()
    world.role("chat", port)
    converge(world)
    for attempt, delay in ((1, 1.0), (2, 2.0)):
        pid = world.pid("chat")
        assert ready(port)
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not alive(pid), 5)
        out = converge(world)
        assert "wait chat" in out.stdout and "backoff" in out.stdout, out.stdout
        # The backoff counts from the exit that pass recorded, not from when this test saw
        # it (a loaded machine can take a second to start the pass): wait until then.
        exited = world.record("chat").exited_at
        assert exited is not None
        time.sleep(max(0.0, exited + delay - time.time()) + 0.3)
        out = converge(world)
        assert f"~ restart chat :{port} (crashed" in out.stdout, out.stdout
        assert world.record("chat").restarts == attempt
    pid = world.pid("chat")
    assert ready(port)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not alive(pid), 5)
    out = converge(world, expect=3)
    assert "gave-up" in out.stdout or "give-up" in out.stdout, out.stdout
    record = world.record("chat")
    assert record.terminal == "gave-up" and record.reserved == 0
    # Terminal: later passes do not restart it.
    converge(world, expect=3)
    assert world.record("chat").pid is None

    out = world.reconcile("start", "chat")
    assert out.returncode == 0, out.stdout + out.stderr
    assert ready(port)
    record = world.record("chat")
    assert record.terminal is None and record.restarts == 0 and alive(record.pid)


def test_server_bound_beyond_loopback_is_stopped_and_held(world):
    """A launcher that binds 0.0.0.0 is stopped within the pass that starts it: stopped-exposed."""
    from tests.e2e.conftest import LLAMA_SERVER

    bad = executable(world.root / "bin" / "exposing-llama-server", f"""\
        #!/bin/sh
        exec {LLAMA_SERVER} "$@" --host 0.0.0.0
        """)
    port = free_port()
    world.node(program=bad)
    world.model()
    world.role("chat", port)
    out = converge(world, expect=3)  # §5 after start: checked once it listens, same pass
    assert "reachable beyond loopback" in out.stdout, out.stdout
    assert http_get(port, "/health")[0] == 0
    assert world.processes() == []
    record = world.record("chat")
    assert record.terminal == "stopped-exposed" and record.reserved == 0 and record.pid is None
    out = converge(world, expect=3)
    assert "= keep chat" in out.stdout and "stopped-exposed" in out.stdout, out.stdout
    assert http_get(port, "/health")[0] == 0  # nothing started again


def test_foreign_listener_is_never_signalled_and_role_refused(world):
    """Something else on the port: no signal, no start, the role is refused."""
    port = free_port()
    foreign = subprocess.Popen(["/usr/bin/python3", "-m", "http.server", str(port),
                                "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: http_get(port, "/")[0] == 200, 10)
        world.node()
        world.model()
        world.role("chat", port)
        out = converge(world, expect=3)
        assert "already taken" in out.stdout and "adopt it instead" in out.stdout, out.stdout
        assert foreign.poll() is None
        assert world.pid("chat") is None
        with world.store() as store:
            logged = len(store.events("chat"))
        converge(world, expect=3)  # the same refusal again: news to nobody
        with world.store() as store:
            assert len(store.events("chat")) == logged == 1
    finally:
        foreign.kill()
        foreign.wait()


def test_recycled_pid_is_not_signalled(world):
    """A recorded pid now held by another process (other create time) is left alone."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    converge(world)
    record = world.record("chat")
    os.kill(record.pid, signal.SIGKILL)
    assert wait_for(lambda: not alive(record.pid), 5)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        import attrs

        with world.store() as store:
            store.put_role(attrs.evolve(record, process=attrs.evolve(record.process,
                                                                       pid=stranger.pid)))
        world.role("chat", port, state="stopped")
        converge(world)
        assert stranger.poll() is None, "a process we do not own was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def test_launcher_ignoring_sigterm_is_killed_after_grace_with_its_grandchild(world):
    """SIGTERM ignored → SIGKILL to the group after stop_grace; the grandchild dies too."""
    stubborn = executable(world.root / "bin" / "stubborn-server", """\
        #!/usr/bin/python3
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["/usr/bin/python3", "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        open("grandchild.pid", "w").write(str(child.pid))
        time.sleep(600)
        """)
    port = free_port()
    world.node(program=stubborn, stop_grace="1s")
    world.model()
    world.role("chat", port)
    converge(world)
    record = world.record("chat")
    pid_file = world.state / "instances" / record.instance_id / "grandchild.pid"
    assert wait_for(pid_file.exists, 5)
    grandchild = int(pid_file.read_text())
    assert alive(record.pid) and alive(grandchild)
    world.role("chat", port, state="stopped")
    started = time.monotonic()
    converge(world)
    assert time.monotonic() - started >= 1.0  # waited the grace first
    assert wait_for(lambda: not alive(record.pid) and not alive(grandchild), 5)


def _orphan(world, role: str, *, cwd: Path | None = None, extra_argv: tuple[str, ...] = ()):
    """Spawn exactly what the reconciler would, as if it died before recording it."""
    from reconciler.planner import identity
    from reconciler.repo.sources import load_desired

    desired = load_desired([str(world.manifests)]).desired
    models = {m.name: m for m in desired.models}
    launch = identity.launch(desired.role(role), models, desired.node, os.environ,
                             str(world.state / "instances"))
    workdir = cwd or Path(launch.cwd)
    workdir.mkdir(parents=True, exist_ok=True)
    os.chown(workdir, NOBODY, NOBODY)
    return launch, subprocess.Popen(
        [*launch.argv, *extra_argv], env=dict(launch.env), cwd=workdir,
        start_new_session=True, user=NOBODY, group=NOBODY, extra_groups=[],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def test_spawned_but_unrecorded_server_is_readopted_not_doubled(world):
    """A server spawned by a reconciler killed before recording it is adopted, not started twice."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    launch, orphan = _orphan(world, "chat")
    try:
        assert ready(port)
        assert "= keep chat" in world.reconcile("plan").stdout  # plan predicts the adoption
        out = converge(world)
        assert "start chat" not in out.stdout, out.stdout
        record = world.record("chat")
        assert record.pid == orphan.pid and record.launch_digest == launch.digest
        assert record.reserved == world.size  # it holds its footprint like any server
        marker = record.instance_id
        servers = [p for p in world.processes() if p.environ().get("RECONCILER_INSTANCE") == marker]
        assert [p.pid for p in servers] == [orphan.pid]
        assert "No changes" in converge(world).stdout
    finally:
        orphan.kill()
        orphan.wait()


def test_readopted_server_with_another_launch_is_restarted(world):
    """An unrecorded server of ours whose argv differs from the launch is replaced, not kept."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    _, orphan = _orphan(world, "chat", extra_argv=("--seed", "7"))
    try:
        assert ready(port)
        out = converge(world)
        assert "~ restart chat" in out.stdout and "spec_changed" in out.stdout, out.stdout
        assert wait_for(lambda: orphan.poll() is not None, 5)
        assert ready(port) and world.pid("chat") != orphan.pid
    finally:
        orphan.kill()
        orphan.wait()


def test_marker_alone_does_not_make_a_process_ours(world):
    """A marked process outside the instance directory is foreign: refused, never signalled."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    elsewhere = world.root / "elsewhere"
    _, impostor = _orphan(world, "chat", cwd=elsewhere)
    try:
        assert ready(port)
        out = converge(world, expect=3)
        assert "already taken" in out.stdout, out.stdout
        assert impostor.poll() is None and world.pid("chat") is None
    finally:
        impostor.kill()
        impostor.wait()


def test_a_second_reconciler_waits_for_the_lock_then_gives_up(world):
    """Two runs never act at once: the second one exits 1 naming the holder."""
    from reconciler.state.lock import Lock

    world.node()
    world.model()
    lock = Lock(world.state)
    lock.acquire()
    try:
        out = world.reconcile("--once", "--lock-timeout", "0.3")
        assert out.returncode == 1
        assert "another reconciler holds" in out.stderr and str(os.getpid()) in out.stderr
    finally:
        lock.release()
    assert world.reconcile("--once").returncode == 0


def test_concurrent_runs_start_one_server(world):
    """Two --once runs started together give exactly one server."""
    port = free_port()
    world.node()
    world.model()
    world.role("chat", port)
    runs = [subprocess.Popen(
        [sys.executable, "-m", "reconciler",
         "-f", str(world.manifests), "--state-dir", str(world.state), "--once",
         "--lock-timeout", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)]
    outs = [r.communicate(timeout=60) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    assert sum("+ start chat" in o[0] for o in outs) == 1, outs
    assert ready(port)
    assert len(world.processes()) >= 1
    leaders = {os.getpgid(p.pid) for p in world.processes()}
    assert len(leaders) == 1


def test_over_budget_is_unplaceable_naming_the_holders(world):
    """A start that would exceed the memory budget is refused and names who holds it."""
    a, b = sorted({free_port(), free_port()})  # starts are placed in (port, name) order
    world.node(budget="1MB")
    world.model()
    world.role("first", a, memory="memory: {weights: 600kB, kv: 0}")
    world.role("second", b, memory="memory: {weights: 600kB, kv: 0}")
    out = converge(world, expect=3)
    assert "unplaceable" in out.stdout, out.stdout
    assert "held by first" in out.stdout, out.stdout
    assert world.pid("second") is None and world.pid("first")
