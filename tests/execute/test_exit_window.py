"""A stopped server is gone only when its last thread is: until then it holds its port (§4).

A killed multi-threaded server (mlx_lm.server) shows its leader as a zombie a
few milliseconds before its last thread has exited; that thread still holds
the listening socket, so a restart that trusted the zombie found its own
server's port "already taken". These tests widen that window on purpose: on
SIGTERM the main thread ends alone (the ``exit`` system call, not
``exit_group``) while another thread keeps the listener open for a while.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import time
from pathlib import Path

import pytest

from reconciler.world import execute, procs

from .conftest import wait_for

INSTANCE = "role-0000abcd"
SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine())
LINGER = 0.5

LEADER_EXITS_FIRST = f"""
import ctypes, signal, socket, threading, time, os
listener = socket.create_server(("127.0.0.1", 0))
def linger():
    time.sleep({LINGER})
    os._exit(0)
def on_term(*_):
    threading.Thread(target=linger).start()
    ctypes.CDLL(None).syscall({SYS_EXIT}, 0)  # only the main thread ends
signal.signal(signal.SIGTERM, on_term)
open("port.tmp", "w").write(str(listener.getsockname()[1]))
os.rename("port.tmp", "port")
time.sleep(60)
"""

pytestmark = pytest.mark.skipif(SYS_EXIT is None, reason=f"no SYS_exit number for {platform.machine()}")


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _serve(world):
    launch = world.launch(LEADER_EXITS_FIRST, instance=INSTANCE)
    started = world.spawn(launch)
    assert started.ok, started.error
    port_file = Path(launch.cwd) / "port"
    assert wait_for(port_file.exists)
    port = int(port_file.read_text())
    assert accepts(port)
    return started, port


def test_zombie_leader_with_a_live_thread_is_exiting(world):
    """procs.exiting: the leader is a zombie but a thread still holds the listener."""
    started, port = _serve(world)
    assert not procs.exiting(started.pid, started.create_time)
    os.kill(started.pid, signal.SIGTERM)
    assert wait_for(lambda: procs.exiting(started.pid, started.create_time), timeout=2.0)
    assert not procs.is_running(started.pid, started.create_time) and accepts(port)
    assert not procs.exiting(started.pid, started.create_time - 100.0)  # another process


def test_stop_returns_only_when_the_port_is_free(world):
    """stop() waits out the last thread: when it says gone, nothing accepts on the port."""
    started, port = _serve(world)
    t0 = time.monotonic()
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=5.0)
    assert result.ok and result.gone and not result.killed, result
    assert not accepts(port)
    assert time.monotonic() - t0 >= LINGER - 0.1
