"""``reconcile start`` under a running ``reconcile watch``: real servers, the real daemon."""

from __future__ import annotations

import os
import signal
import time

import pytest

from reconciler.state.lock import Lock
from tests.e2e.conftest import free_port, wait_for
from tests.watch.test_watch_e2e import alive, daemons, events, new_pid, ready  # noqa: F401

pytestmark = pytest.mark.e2e


def test_start_under_watch_revives_a_gave_up_role_while_the_daemon_keeps_running(
        world, daemons):  # noqa: F811 (a fixture)
    """gave-up under watch (max_restarts 1, kill -9 twice); `start` hands it to the same daemon."""
    port = free_port()
    world.node(restart="{max_restarts: 1, base: 200ms, cap: 1s, stable_after: 60s}")
    world.model()
    world.role("chat", port)
    daemon = daemons()
    assert ready(port), daemon.log
    first = world.pid("chat")
    os.kill(first, signal.SIGKILL)
    second = new_pid(world, "chat", first)
    assert second, daemon.log
    assert world.record("chat").restarts == 1
    os.kill(second, signal.SIGKILL)
    assert wait_for(lambda: world.record("chat").terminal == "gave-up", 10), daemon.log
    assert wait_for(lambda: not alive(second), 5)

    asked = time.time()
    out = world.reconcile("start", "chat")
    assert out.returncode == 0, out.stdout + out.stderr + daemon.log
    assert f"handed to `reconcile watch` (pid {daemon.proc.pid})" in out.stdout, out.stdout
    assert "chat: operator-start (operator: cleared gave-up, restarts 1 → 0)" in out.stdout
    assert "chat: start done (missing: operator start" in out.stdout, out.stdout

    # The same daemon still runs and still holds the lock; the role runs again from 0.
    assert daemon.proc.poll() is None
    assert Lock(world.state).holder() == daemon.proc.pid
    record = world.record("chat")
    assert record.terminal is None and record.restarts == 0, record
    assert record.pid not in (first, second) and alive(record.pid)
    assert ready(port)
    assert [e.kind for e in events(world, "chat", after=asked)][:2] == ["operator-start", "start"]
    with world.store() as store:
        assert store.queued_starts() == frozenset()
    assert daemon.stop() == 0
