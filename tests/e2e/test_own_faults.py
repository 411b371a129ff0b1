"""Faults of the reconciler's own world, for real: one clear line, no server harmed, a way back.

Each test starts a real llama-server first and checks it is the same process
(same pid, still answering) after the fault and after the way back. The
README's table "When the reconciler's own world breaks" is these tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.e2e.conftest import free_port, http_get, wait_for

pytestmark = pytest.mark.e2e


def _world(world, *, outside: bool = True) -> int:
    """A node whose instance directories live outside the state directory; one role, running."""
    port = free_port()
    extra = ""
    if outside:
        data = world.root / "data"
        data.mkdir()
        os.chmod(data, 0o755)
        extra = f"  data_root: {data}"
    world.node(extra=extra)
    world.model()
    world.role("chat", port)
    out = world.reconcile("--once")
    assert out.returncode == 0, out.stdout + out.stderr
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
    return port


def _same_server(world, pid: int, port: int) -> bool:
    return os.path.exists(f"/proc/{pid}") and http_get(port, "/health")[0] == 200


def test_a_corrupt_state_db_is_one_line_and_moving_it_aside_readopts(world):
    """Garbage in state.db: every command exits 1 in one line naming the way back; then re-adopted."""
    port = _world(world)
    pid = world.pid("chat")
    db = world.state / "state.db"
    for sidecar in ("state.db-wal", "state.db-shm"):
        (world.state / sidecar).unlink(missing_ok=True)
    db.write_bytes(b"not a database, not at all" * 200)
    for command in (("--once",), ("status",), ("plan",)):
        out = world.reconcile(*command)
        assert out.returncode == 1, out
        (line,) = out.stderr.splitlines()
        assert line == (f"reconcile: error: state store {db}: file is not a database; move it "
                        "aside (e.g. state.db.corrupt): the next run starts a new one and "
                        "re-adopts the running servers by their marker")
    assert _same_server(world, pid, port)
    db.rename(world.state / "state.db.corrupt")
    out = world.reconcile("--once")
    assert out.returncode == 0 and "= keep chat" in out.stdout, out.stdout + out.stderr
    assert world.pid("chat") == pid and _same_server(world, pid, port)


@pytest.mark.skipif(os.geteuid() != 0, reason="a real full filesystem needs root (unshare -m, "
                    "mount -t tmpfs); the SQLITE_FULL path is also pinned by test_store")
def test_a_full_filesystem_is_one_line_and_freeing_space_resumes(world):
    """state.db on a full tmpfs: exit 1 naming the full filesystem; servers untouched; then resumes."""
    port = _world(world)
    pid = world.pid("chat")
    moved = world.root / "state-before"
    shutil.move(world.state, moved)
    world.state.mkdir()
    rec = f"{sys.executable} -m reconciler -f {world.manifests} --state-dir {world.state}"
    script = textwrap.dedent(f"""\
        set -e
        mount -t tmpfs -o size=2m tmpfs {world.state}
        cp -a {moved}/. {world.state}/
        dd if=/dev/zero of={world.state}/filler bs=4k 2>/dev/null || true
        set +e
        {rec} --once; echo "once=$?"
        {rec} --once; echo "again=$?"
        rm {world.state}/filler
        {rec} --once; echo "freed=$?"
        umount -l {world.state}
        """)
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=world.root)
    said = out.stdout + out.stderr
    assert "once=1" in said and "again=1" in said and "freed=0" in said, said
    errors = [line for line in out.stderr.splitlines() if line.startswith("reconcile: error:")]
    assert len(errors) == 2 and all(
        f"{world.state} is on a full filesystem: free space there, and the next pass resumes"
        in line for line in errors), said
    assert "= keep chat" in out.stdout, said
    assert _same_server(world, pid, port)


def _daemon(world) -> subprocess.Popen:
    with open(world.root / "watch.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(world.manifests), "--state-dir",
             str(world.state), "watch", "--resync", "1"],
            stdout=subprocess.DEVNULL, stderr=log)


def test_the_state_directory_removed_under_watch_stops_it_and_a_restart_readopts(world):
    """rm -rf of the state dir: the daemon exits 1 in one line, servers run on; a new run re-adopts."""
    port = _world(world)
    pid = world.pid("chat")
    daemon = _daemon(world)
    try:
        assert wait_for(lambda: "watch started" in (world.root / "watch.log").read_text(), 15)
        time.sleep(1.5)
        shutil.rmtree(world.state)
        assert daemon.wait(15) == 1
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    log = (world.root / "watch.log").read_text()
    assert (f"the state directory {world.state} was removed or replaced under this reconciler; "
            "stopping, managed servers left running; start the reconciler again: it re-adopts "
            "them by their marker") in log, log[-2000:]
    assert _same_server(world, pid, port)
    out = world.reconcile("--once")
    assert out.returncode == 0 and "= keep chat" in out.stdout, out.stdout + out.stderr
    assert world.pid("chat") == pid


def test_the_lock_file_removed_under_watch_never_makes_two_writers(world):
    """rm lock under a daemon: a second run still finds it held; the daemon re-creates the file."""
    port = _world(world)
    pid = world.pid("chat")
    daemon = _daemon(world)
    try:
        assert wait_for(lambda: (world.state / "lock").read_text().strip() == str(daemon.pid), 15)
        (world.state / "lock").unlink()
        out = world.reconcile("--once")
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stderr.startswith(f"reconcile: error: another reconciler holds "
                                     f"{world.state}/lock"), out.stderr
        assert wait_for(lambda: (world.state / "lock").exists()
                        and (world.state / "lock").read_text().strip() == str(daemon.pid), 15)
        said = f"the lock file {world.state}/lock was removed; re-created it (pid {daemon.pid})"
        assert wait_for(lambda: said in (world.root / "watch.log").read_text(), 5)
        assert daemon.poll() is None and _same_server(world, pid, port)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)
