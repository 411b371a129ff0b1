"""Signals reach the daemon between passes: SIGHUP reconciles now, SIGTERM/SIGINT finish and exit 0."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reconciler.state.lock import Lock

ROOT = Path(__file__).resolve().parents[2]


class Harness:
    def __init__(self, state_dir: Path, pass_seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.watch.harness", str(state_dir), str(pass_seconds)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self._stderr: list[str] = []
        self._reader = threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr),
                                        daemon=True)
        self._reader.start()

    def expect(self, wanted: str, timeout: float = 10.0) -> None:
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if self.lines[-1] == wanted:
                    return
        finally:
            timer.cancel()
        raise AssertionError(f"never saw {wanted!r}: {self.lines} {self.stderr}")

    def wait_stderr(self, wanted: str, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while wanted not in self.stderr:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def harness(tmp_path):
    made: list[Harness] = []

    def make(pass_seconds: float = 0.0) -> Harness:
        made.append(Harness(tmp_path / "state", pass_seconds))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_sighup_reconciles_now(harness):
    """SIGHUP runs a pass at once (the resync timer is an hour away)."""
    h = harness()
    h.expect("pass end")
    h.proc.send_signal(signal.SIGHUP)
    h.expect("pass end", timeout=5)
    # stderr is drained by another thread: the log line may trail stdout's "pass end".
    assert h.wait_stderr("pass (SIGHUP)"), h.stderr
    h.proc.send_signal(signal.SIGTERM)
    h.expect("exit 0")
    assert h.proc.wait(5) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_finishes_the_pass_in_progress(harness, signum):
    """A stop signal during a pass lets the pass finish, then the daemon exits 0."""
    h = harness(pass_seconds=0.5)
    h.expect("pass start")
    h.proc.send_signal(signum)
    h.expect("pass end")
    h.expect("exit 0")
    assert h.proc.wait(5) == 0
    assert h.lines.count("pass start") == 1
    assert h.wait_stderr(f"received {signal.Signals(signum).name}"), h.stderr
    assert "Traceback" not in h.stderr


class EarlyDaemon:
    """A real ``reconcile watch`` held in the window between taking the lock and its handlers.

    The test holds an exclusive SQLite lock on the (empty) state database, so
    once the lock file names the daemon's pid it waits in opening the store,
    where ``reconcile start`` may already signal it. ``release()`` lets it on;
    its first pass ends with the metrics file.
    """

    def __init__(self, root: Path) -> None:
        (root / "manifests").mkdir()
        self.state, self.prom = root / "state", root / "reconciler.prom"
        self.state.mkdir()
        self._db = sqlite3.connect(self.state / "state.db", isolation_level=None)
        self._db.execute("BEGIN EXCLUSIVE")
        self.log_path = root / "watch.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler", "-f", str(root / "manifests"),
                 "--state-dir", str(self.state), "watch", "--resync", "3600",
                 "--metrics-file", str(self.prom)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_lock(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while Lock(self.state).holder() != self.proc.pid:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.log}"
            assert time.monotonic() < deadline, self.log
            time.sleep(0.005)

    def release(self) -> None:
        if self._db is not None:
            self._db.execute("ROLLBACK")
            self._db.close()
            self._db = None

    def close(self) -> None:
        self.release()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def early(tmp_path):
    daemon = EarlyDaemon(tmp_path)
    yield daemon
    daemon.close()


def test_sighup_before_the_handlers_does_not_kill_the_daemon(early):
    """SIGHUP from when the lock names the daemon to its first pass: it survives, exits 0 later."""
    early.wait_for_lock()
    # Signalled inside the window for sure: it cannot open the store until release().
    for _ in range(3):
        early.proc.send_signal(signal.SIGHUP)
        time.sleep(0.01)
    assert early.proc.poll() is None, f"killed ({early.proc.returncode}) in the window"
    early.release()
    deadline = time.monotonic() + 20
    while not early.prom.exists():
        assert early.proc.poll() is None, f"exited {early.proc.returncode}: {early.log}"
        assert time.monotonic() < deadline, early.log
        early.proc.send_signal(signal.SIGHUP)
        time.sleep(0.005)
    early.proc.send_signal(signal.SIGHUP)  # handled now: one more pass
    assert early.proc.poll() is None
    early.proc.send_signal(signal.SIGTERM)
    assert early.proc.wait(20) == 0, early.log
    assert "received SIGTERM" in early.log and "Traceback" not in early.log


def test_sigterm_before_the_handlers_stops_the_daemon_after_its_first_pass(early):
    """A SIGTERM in the window is not lost and not fatal: one pass, then a clean exit 0."""
    early.wait_for_lock()
    early.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    assert early.proc.poll() is None, f"killed ({early.proc.returncode}) in the window"
    early.release()
    assert early.proc.wait(20) == 0, early.log
    assert early.prom.exists(), early.log
    assert "received SIGTERM" in early.log and "stopping: lock released" in early.log
