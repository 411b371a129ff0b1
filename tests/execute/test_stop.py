"""stop(): SIGTERM, grace, SIGKILL, the group sweep, and no signal to what is not ours (§3, §4)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from reconciler.world import execute
from reconciler.core.ownership import MARKER_ENV

from .conftest import alive, wait_for

INSTANCE = "role-0000abcd"

STUBBORN_WITH_GRANDCHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
g = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
open("grandchild.pid", "w").write(str(g.pid))
time.sleep(60)
"""

POLITE = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
open("ready", "w").close()
time.sleep(60)
"""

# The leader exits on SIGTERM; its grandchild ignores SIGTERM and inherits the
# environment (ENV = None: it carries the marker) or runs with a cleared one
# (ENV = {}: no marker). It reports its own pid once SIGTERM is ignored, so
# the test cannot race its start-up.
POLITE_WITH_GRANDCHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open('grandchild.pid', 'w').write(str(os.getpid())); time.sleep(60)"], env=ENV)
time.sleep(60)
"""


def _start(world, script, **kwargs):
    launch = world.launch(script, **kwargs)
    result = world.spawn(launch)
    assert result.ok, result.error
    return launch, result


def _wait_file(launch, name) -> Path:
    path = Path(launch.cwd) / name
    assert wait_for(lambda: path.exists() and (name == "ready" or path.read_text().strip() != ""))
    return path


def test_stubborn_server_and_its_grandchild_are_killed_after_the_grace(world):
    """A leader ignoring SIGTERM is SIGKILLed after the grace; its grandchild dies with the group."""
    launch, started = _start(world, STUBBORN_WITH_GRANDCHILD, instance=INSTANCE)
    grandchild = int(_wait_file(launch, "grandchild.pid").read_text())
    t0 = time.monotonic()
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=0.3)
    assert result.ok and result.gone and result.killed, result
    assert time.monotonic() - t0 >= 0.3
    assert not alive(started.pid)
    assert wait_for(lambda: not alive(grandchild), timeout=2.0)


def test_polite_server_stops_on_sigterm_without_sigkill(world):
    """A leader that exits on SIGTERM is gone without a SIGKILL."""
    launch, started = _start(world, POLITE, instance=INSTANCE)
    _wait_file(launch, "ready")
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=5.0)
    assert result == execute.StopResult(ok=True, gone=True, killed=False)
    assert not alive(started.pid)


def test_wrong_create_time_sends_no_signal(world):
    """A pid whose create time differs from the record is not ours: no signal at all."""
    launch, started = _start(world, POLITE, instance=INSTANCE)
    _wait_file(launch, "ready")
    result = execute.stop(started.pid, started.create_time - 100.0, INSTANCE, grace=0.1)
    assert not result.ok and result.error.startswith("not owned:")
    assert not result.killed
    time.sleep(0.2)  # give a wrongly sent SIGTERM time to act
    assert alive(started.pid)


def test_missing_marker_sends_no_signal(world):
    """A process without our marker (or with another instance's) is never signalled."""
    launch, started = _start(world, POLITE, env={"PATH": "/usr/bin:/bin", MARKER_ENV: "other-1"})
    _wait_file(launch, "ready")
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=0.1)
    assert result == execute.StopResult(
        ok=False, gone=False, error=f"not owned: pid {started.pid} does not carry {MARKER_ENV}={INSTANCE}")
    time.sleep(0.2)
    assert alive(started.pid)


def test_already_gone_process_is_a_successful_stop(world):
    """Stopping a server that already exited succeeds: it is gone, memory may be released."""
    launch, started = _start(world, "pass", instance=INSTANCE)
    assert wait_for(lambda: not alive(started.pid))
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=0.1)
    assert result.ok and result.gone and not result.killed


def test_grandchild_outliving_the_leader_is_killed_by_the_sweep(world):
    """After the leader exits on SIGTERM, a marked grandchild ignoring SIGTERM gets SIGKILL."""
    launch, started = _start(world, "ENV = None\n" + POLITE_WITH_GRANDCHILD, instance=INSTANCE)
    grandchild = int(_wait_file(launch, "grandchild.pid").read_text())
    result = execute.stop(started.pid, started.create_time, INSTANCE, grace=2.0)
    assert result == execute.StopResult(ok=True, gone=True, killed=False)
    assert not alive(grandchild)


def test_unmarked_group_member_is_left_alone(world):
    """After the leader is gone, a group member without our marker gets no SIGKILL."""
    launch, started = _start(world, "ENV = {}\n" + POLITE_WITH_GRANDCHILD, instance=INSTANCE)
    grandchild = int(_wait_file(launch, "grandchild.pid").read_text())
    try:
        result = execute.stop(started.pid, started.create_time, INSTANCE, grace=2.0)
        assert result.ok and result.gone and not result.killed
        assert f"left alone (no marker): {grandchild}" in result.detail
        assert alive(grandchild)
    finally:
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)
