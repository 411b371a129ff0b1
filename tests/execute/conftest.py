"""Fixtures for the executor tests: real child processes in a world-traversable dir.

pytest's own tmp dirs are 0700 under root, which uid 65534 cannot enter, so
each test gets its own 0755 directory under /tmp. Every process a test
spawned is SIGKILLed (with its group) and reaped at teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

import pytest

from reconciler.system import programs
from reconciler.world import spawn
from reconciler.core.ownership import MARKER_ENV
from reconciler.planner.identity import DEFAULT_PATH
from reconciler.core.desired import Launch, RunAs

PYTHON = "/usr/bin/python3"  # runnable by any uid, unlike the venv's interpreter
NOBODY = RunAs(uid=65534, gid=65534)


def proc_state(pid: int) -> str | None:
    """The /proc state letter of a pid, or None when it no longer exists."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    state = proc_state(pid)
    return state is not None and state != "Z"


def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_as = NOBODY if os.geteuid() == 0 else None
        self.pids: list[int] = []
        self.counter = 0

    def launch(self, script: str, *, instance: str = "role-0000abcd",
               env: dict[str, str] | None = None, program: str = PYTHON) -> Launch:
        """A Launch running ``script`` with /usr/bin/python3 in a fresh instance dir."""
        self.counter += 1
        base = {"PATH": DEFAULT_PATH, MARKER_ENV: instance} if env is None else env
        return Launch(
            argv=(program, "-c", textwrap.dedent(script)),
            env=tuple(sorted(base.items())),
            cwd=str(self.root / "instances" / f"{instance}-{self.counter}"),
            run_as=self.run_as,
            digest="test",
        )

    def spawn(self, launch: Launch, **kwargs) -> spawn.SpawnResult:
        result = spawn.spawn(launch, **kwargs)
        if result.pid:
            self.pids.append(result.pid)
        return result

    def cleanup(self) -> None:
        for pid in self.pids:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except (ProcessLookupError, PermissionError):
                    pass
        def reaped() -> bool:
            programs.reap()
            return not any(programs.is_child(pid) for pid in self.pids)

        wait_for(reaped, timeout=5.0)


@pytest.fixture
def world():
    root = Path(tempfile.mkdtemp(prefix="reconciler-exec-", dir="/tmp"))
    root.chmod(0o755)
    w = World(root)
    try:
        yield w
    finally:
        w.cleanup()
        shutil.rmtree(root, ignore_errors=True)
