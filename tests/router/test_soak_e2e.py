"""The router soaks in CI (BEHAVIOUR §9, §12): swaps, kill -9 and the official client.

``tools/soak_router.py`` (the longer variant: its defaults) with 8 workers for
35 s and a kill -9 every 8 s: 0 requests failed by our own doing (a stop of
ours that cut one, a 503 while an evictable holder existed — here one always
does —, a timeout in the queue), every other failure within a few seconds of
a kill of its role's server, the daemon's descriptors back to their baseline
after the load, and no traceback in its log. Then three instances of one role:
kill -9 of one every 5 s for 16 s, and a rolling update under load (12 s).

The windows are short so that ``make test`` stays within its time; the
assertions are the same as for the long ones. ``RECONCILER_SOAK=long`` runs the
windows these soaks had before (60 s, 30 s, 25 s); the figures quoted in the
notes and in docs/behaviour.md come from the tool itself, run longer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import _testbed_or_skip

pytestmark = pytest.mark.e2e

TOOL = Path(__file__).resolve().parents[2] / "tools" / "soak_router.py"
LONG = os.environ.get("RECONCILER_SOAK") == "long"


def _window(short: str, long: str) -> str:
    """A soak's seconds (or its kill interval): the CI's short one, or the long one."""
    return long if LONG else short


def test_soak_swaps_and_kills_lose_no_request_of_ours() -> None:
    """§9 requests while roles swap and servers are killed (35 s, a kill every 8 s): at least 100
    requests, none lost by the router, no 503."""
    _testbed_or_skip()
    done = subprocess.run(
        [sys.executable, str(TOOL), "--seconds", _window("35", "60"), "--workers", "8",
         "--kill-every", _window("8", "15"), "--grace", "5", "--settle", "15", "--json"],
        capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["requests"] >= 100, figures
    assert figures["kills"] >= 3, figures
    assert figures["ours"] == 0, figures
    assert figures["status_503"] == 0, figures
    assert figures["evictions"] >= 2 and figures["cold_starts"] >= 2, figures
    assert figures["fds_after"] <= figures["fds_baseline"], figures
    assert figures["tracebacks"] == 0, figures


def _soak(*args: str, timeout: float) -> dict:
    done = subprocess.run([sys.executable, str(TOOL), *args, "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replicas_spread_the_load_and_a_kill_costs_only_its_own_requests() -> None:
    """§9.1/§12 three instances of one role behind one name, the official client through the
    daemon's router, a kill -9 of a random instance every 5 s: every instance answers,
    nothing fails but requests inside a kill (at most the killed server's 4 slots each)."""
    _testbed_or_skip()
    figures = _soak("--replicas", "3", "--seconds", _window("16", "30"), "--workers", "8",
                    "--kill-every", _window("5", "10"), "--grace", "0", "--settle", "5",
                    timeout=150)
    assert figures["requests"] >= 100 and figures["kills"] >= 2, figures
    assert figures["ours"] == 0 and figures["status_503"] == 0, figures
    assert figures["failed"] <= 4 * figures["kills"], figures
    answered = figures["answered_by_instance"]
    assert set(answered) == {"chat", "chat/1", "chat/2"}, figures
    assert min(answered.values()) >= figures["requests"] // 10, figures  # spread, not one
    assert figures["tracebacks"] == 0, figures


def test_a_rolling_update_under_load_fails_no_request() -> None:
    """§12 `restarted_at` on a role of three instances while 8 clients keep asking: one
    instance restarted at a time, each drained first (§9), and not one request fails."""
    _testbed_or_skip()
    figures = _soak("--replicas", "3", "--seconds", _window("12", "25"), "--workers", "8",
                    "--kill-every", "0", "--restart-at", _window("3", "5"), "--grace", "0",
                    "--settle", "5", timeout=150)
    assert figures["rollout_seconds"] is not None, figures  # every instance runs a new server
    assert figures["requests"] >= 100 and figures["failed"] == 0, figures
    assert figures["tracebacks"] == 0, figures
