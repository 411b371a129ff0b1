"""Every exit says why, and `reconcile logs`, against the real llama-server (BEHAVIOUR §4).

The testbed's tiny GGUF has head dim 16, so ``kv_quant: q8_0`` makes the real
llama-server refuse to load: the failure users met with no word of why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.e2e.conftest import free_port, http_get, wait_for
from tests.support import roles
from reconciler.planner import exitreasons

pytestmark = pytest.mark.e2e

WHY = "K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"


def _role(world, name: str, port: int, *, kv_quant: str = "") -> None:
    world.write(f"role-{name}.yaml", roles.inference_spec(
        name, port, serve=f"kv_quant: {kv_quant}" if kv_quant else ""))


def _status(world, name: str) -> dict:
    out = world.reconcile("status", name, "--json")
    assert out.returncode in (0, 3), out.stdout + out.stderr
    return json.loads(out.stdout)["roles"][0]


def _alive(pid: int | None) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_once_run_knows_the_code_of_a_server_that_dies_while_it_waits(world):
    """--once waits for a new server to listen (§5 after start): one dying then is its child.

    The backoff is long (30 s), so that `status` still finds the role in it however slow
    the machine (with the default 1 s base a loaded one saw `exited`, next `restart`)."""
    name = "chat"
    world.node(restart="{max_restarts: 3, base: 30s, cap: 60s, stable_after: 60s}")
    world.model()
    _role(world, name, free_port(), kv_quant="q8_0")
    world.reconcile("--once")
    for _ in range(2):
        assert wait_for(lambda: not _alive(world.pid(name)), 10)
        row = _status(world, name)
        if row["exit"] is None or row["exit"]["known"] or "not recorded" not in row["detail"]:
            break
        # The premise needs the server to die within the pass's wait for it to listen
        # (exposure.LISTEN_WAIT, 2 s): a machine loaded enough to take longer to load the
        # tiny model ends the pass first, and the exit is honestly not recorded (the next
        # test). Start it again, with a pass that waits the same: the checks below are of
        # what a pass knows when the premise holds, and fail if it never does.
        world.reconcile("start", name)
    assert row["status"] == "backoff", json.dumps(row)
    assert row["detail"].startswith(
        f"exited (code 1): llama_init_from_model: {WHY}; restart 1 of 3 in "), row["detail"]
    assert "\n" not in row["detail"]
    assert row["exit"]["known"] is True and row["exit"]["code"] == 1
    assert row["exit"]["log"][-1].endswith("exiting due to model loading error")
    # The event of the next pass says it too, and the record keeps it across runs.
    world.reconcile("--once")
    with world.store() as store:
        said = [e.detail for e in store.events(name)]
        assert any(WHY in d for d in said), said
        assert any(WHY in line for line in store.role(name).exit.log)


def test_a_once_run_tells_why_a_server_it_no_longer_parents_exited(world):
    """A server that dies after the --once run that started it ended: honestly no code.
    `status` records nothing, so until a pass that acts has looked it says the status is
    not recorded yet (a running watch, its parent, may still record it)."""
    port = free_port()
    world.node()
    world.model()
    _role(world, "chat", port)
    assert world.reconcile("--once").returncode == 0
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
    pid = world.pid("chat")
    os.kill(pid, signal.SIGKILL)  # by someone else, after the run: its parent is long gone
    assert wait_for(lambda: not _alive(pid), 10)
    row = _status(world, "chat")
    assert row["detail"].startswith("exited (exit status not recorded yet)"), row["detail"]
    assert world.reconcile("--once").returncode == 0  # a pass that records: it is nobody's child
    with world.store() as store:
        recorded = store.role("chat").exit
    assert recorded is not None and recorded.known is False and not recorded.pending
    assert exitreasons.headline(recorded) == (
        "exited (exit status unknown: not a child of this reconciler)")
    assert recorded.code is None and recorded.signal is None


def test_watch_knows_the_exit_code_and_the_signal_of_its_own_children(world):
    """Under `watch` the server is its child: `exited (code 1)`, and `killed by SIGKILL`."""
    port = free_port()
    world.node(restart="{max_restarts: 3, base: 30s, cap: 60s, stable_after: 60s}")
    world.model()
    _role(world, "chat", port, kv_quant="q8_0")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "-f", str(world.manifests), "--state-dir",
         str(world.state), "watch", "--resync", "60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # (`status` itself is nobody's parent: until watch has recorded the exit it says
        # "not recorded yet"; then the code watch read as the server's parent.)
        detail = wait_for(lambda: (d := _status(world, "chat")["detail"]).startswith("exited (")
                          and exitreasons.NOT_RECORDED_YET not in d and d, 20)
        assert detail.startswith(f"exited (code 1): llama_init_from_model: {WHY}; restart 1 of 3 in"), \
            detail
        _role(world, "chat", port)  # the fix: a good launch
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        pid = world.pid("chat")
        os.kill(pid, signal.SIGKILL)
        detail = wait_for(lambda: (d := _status(world, "chat")["detail"]).startswith("killed")
                          and d, 20)
        assert detail and detail.startswith("killed by SIGKILL"), detail
        row = _status(world, "chat")
        assert row["exit"]["known"] is True and row["exit"]["signal"] == "SIGKILL"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)


def test_logs_prints_the_last_lines_and_fails_clearly(world):
    """`logs -n N` prints N lines of the real server's log; an unknown role exits 1 in one line."""
    port = free_port()
    world.node()
    world.model()
    _role(world, "chat", port, kv_quant="q8_0")
    world.reconcile("--once")
    assert wait_for(lambda: not _alive(world.pid("chat")), 10)
    out = world.reconcile("logs", "chat", "-n", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and lines[-1].endswith("exiting due to model loading error")
    out = world.reconcile("logs", "nobody")
    assert out.returncode == 1
    assert out.stderr.strip() == ("reconcile: error: no role 'nobody' in the manifests or the "
                                  "state store")
    _role(world, "fresh", free_port())
    world.write("role-fresh.yaml", (world.manifests / "role-fresh.yaml").read_text()
                .replace("mode: managed", "mode: managed\n  state: stopped"))
    out = world.reconcile("logs", "fresh")
    assert out.returncode == 1 and "has no server log" in out.stderr, out.stderr


def _ctrl_c_default() -> None:
    """In the follower, before its exec: SIGINT at its default action, so Python puts in its
    Ctrl-C handler. A suite started as a background job of a non-interactive shell runs with
    SIGINT ignored (POSIX), and an ignored signal stays ignored across fork and exec: the
    follower would never see the SIGINT this test sends (it did, once, in CI)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_logs_follow_crosses_a_restart_into_the_new_server(world):
    """`logs --follow` keeps printing after the server is killed and restarted by a pass."""
    port = free_port()
    world.node(restart="{max_restarts: 3, base: 1s, cap: 8s, stable_after: 60s}")
    world.model()
    _role(world, "chat", port)
    assert world.reconcile("--once").returncode == 0
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
    follow = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "-f", str(world.manifests), "--state-dir",
         str(world.state), "logs", "chat", "-n", "1", "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_default)
    try:
        time.sleep(1.0)
        os.kill(world.pid("chat"), signal.SIGKILL)
        assert wait_for(lambda: not _alive(world.pid("chat")), 5)
        world.reconcile("--once")  # sees the exit: backoff 1 s
        time.sleep(1.3)
        world.reconcile("--once")  # restarts it: a run mark, then the new server's lines
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
        time.sleep(1.0)
    finally:
        follow.send_signal(signal.SIGINT)
        try:
            out, err = follow.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            follow.kill()  # never left behind to fail a later test
            follow.communicate()
            raise
    assert follow.returncode == 130, (follow.returncode, err)
    assert "--- reconciler: " in out and ": starting llama-server ---" in out, out[-2000:]
    after = out.split("--- reconciler: ")[-1]
    assert "load_model: loading model" in after, after[-2000:]
