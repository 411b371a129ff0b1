"""The platform contract's fixtures: each implementation by name, and real processes to look at."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from reconciler.platform import choose
from reconciler.planner.identity import MARKER_ENV

#: The implementations every contract test runs against (linux only where it can run).
NAMES = [pytest.param(name, marks=pytest.mark.skipif(
    name == "linux" and not sys.platform.startswith("linux"), reason="needs Linux"))
    for name in choose.NAMES]


@pytest.fixture(params=NAMES)
def platform(request):
    """One implementation of the seam, built fresh (``RECONCILER_PLATFORM``'s names)."""
    return choose.build(request.param)


@pytest.fixture
def selector():
    with selectors.DefaultSelector() as sel:
        yield sel


#: The first line of every spawned script: it runs (the exec is done).
READY = "open('ready', 'w').close()"


@pytest.fixture
def spawn(tmp_path):
    """Start real processes (each leading its own session); SIGKILL and reap them at teardown.

    ``spawn(script, marker=…)`` runs ``script`` in Python in a fresh directory under
    ``tmp_path`` with ``RECONCILER_INSTANCE`` set to ``marker``; ``orphan=True`` starts
    ``sleep`` through a shell that exits, so it is not this process's child.
    """
    children: list[subprocess.Popen] = []
    pids: list[int] = []

    def start(script: str = "import time; time.sleep(60)", *, marker: str = "chat-0000aaaa",
              orphan: bool = False, stdout=None) -> subprocess.Popen | int:
        if orphan:
            out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True)
            pids.append(int(out.stdout))
            return pids[-1]
        cwd = tmp_path / f"{marker}-{len(children)}"
        cwd.mkdir()
        child = subprocess.Popen([sys.executable, "-c", f"{READY}\n{script}"], cwd=cwd,
                                 stdout=stdout, env={**os.environ, MARKER_ENV: marker},
                                 start_new_session=True)
        children.append(child)
        pids.append(child.pid)
        # Popen may return before the child's exec (its argv and environment not yet
        # the script's): wait until the script runs.
        assert wait_for(lambda: (cwd / "ready").exists() or child.poll() is not None)
        return child

    yield start
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for child in children:
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def wait_for(check, timeout: float = 5.0, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return bool(check())
