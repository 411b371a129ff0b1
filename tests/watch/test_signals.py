"""Signals reach the daemon between passes: SIGHUP reconciles now, SIGTERM/SIGINT finish and exit 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

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
    assert "pass (SIGHUP)" in h.stderr
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
    assert f"received {signal.Signals(signum).name}" in h.stderr
    assert "Traceback" not in h.stderr
