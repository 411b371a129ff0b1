"""The kill -9 scenario (BEHAVIOUR §3, §4): `reconcile --once` SIGKILLed anywhere in a pass.

Used by ``tests/e2e/test_kill9.py`` (a CI-sized run) and ``tools/kill9.py`` (a
longer one for reports). Three roles move between manifest *states* — their
ports moved back and forth (restarts of every role), one stopped and one
removed, then back — while each `--once` is killed either after a uniformly
random delay over [0, pass length] or at a named failpoint
(``reconciler/failpoints.py``). Afterwards plain passes run until
``plan --detailed-exitcode`` is 0; ``check`` says what is left.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import attrs
import psutil

from tests.e2e.conftest import http_get, wait_for

FAILPOINTS = ("intent-written", "stopped", "before-spawn", "after-spawn", "spawn-recorded",
              "recording")
ROLES = ("r1", "r2", "r3")
_CRASH_REASONS = {"crashed", "backoff", "max_restarts", "startup_timeout"}


@attrs.define
class Figures:
    pass_length: float = 0.0
    rounds: int = 0
    kills: int = 0
    killed_at: dict = attrs.Factory(dict)  # failpoint or "random" → kills
    passes_to_converge: int = 0
    orphans_at_end: int = -1
    restarts_counted: int = -1
    integrity: str = ""
    miscounted: list = attrs.Factory(list)  # the crash-like events, for a report

    def line(self) -> str:
        return (f"pass length {self.pass_length:.2f}s, rounds {self.rounds}, kills {self.kills} "
                f"({', '.join(f'{k} {v}' for k, v in sorted(self.killed_at.items()))}), "
                f"passes to converge {self.passes_to_converge}, orphans at end "
                f"{self.orphans_at_end}, restarts counted {self.restarts_counted}, "
                f"state.db {self.integrity}")


class Scenario:
    """The manifest states the rounds cycle through, written into ``world``."""

    def __init__(self, world, home: list[int], fresh_port) -> None:
        self.world, self.home, self.fresh_port = world, home, fresh_port
        world.node(restart="{max_restarts: 3, base: 1s, cap: 4s, stable_after: 60s}")
        world.model()

    def write(self, state: int) -> dict[str, int]:
        """State 0: home ports; 1: every port moved to a new one (never asked for again:
        a since-reverted edit); 2: home ports, r2 removed, r3 stopped. → the wanted ports."""
        w = self.world
        wanted = {}
        for i, name in enumerate(ROLES):
            port = self.home[i] if state != 1 else self.fresh_port()
            if state == 2 and name == "r2":
                if (w.manifests / f"role-{name}.yaml").exists():
                    w.remove(f"role-{name}.yaml")
                continue
            running = not (state == 2 and name == "r3")
            w.role(name, port, state="running" if running else "stopped")
            if running:
                wanted[name] = port
        return wanted


def one_pass(world, env: dict | None = None, timeout: float = 60.0):
    return world.reconcile("--once", env=env, timeout=timeout)


def measure(world) -> float:
    """The length of an unkilled pass that restarts every role (A → B ports)."""
    started = time.monotonic()
    out = one_pass(world)
    assert out.returncode == 0, out.stdout + out.stderr
    return time.monotonic() - started


def killed_pass(world, *, delay: float | None, failpoint: str | None) -> bool:
    """One `--once`, SIGKILLed after ``delay`` s or at ``failpoint``; True when it was killed."""
    env = {"RECONCILER_FAILPOINT": failpoint} if failpoint else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "-f", str(world.manifests),
         "--state-dir", str(world.state), "--once"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})})
    if delay is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return proc.returncode == -signal.SIGKILL


def run_rounds(world, scenario: Scenario, rounds: int, rng: random.Random,
               figures: Figures) -> None:
    """``rounds`` killed passes, each after a manifest change, half random, half at failpoints."""
    for n in range(rounds):
        scenario.write(n % 3)
        if n % 2 == 0:
            delay, point = rng.uniform(0, figures.pass_length), None
        else:
            delay, point = None, f"{FAILPOINTS[(n // 2) % len(FAILPOINTS)]}:{rng.randint(1, 2)}"
        if killed_pass(world, delay=delay, failpoint=point):
            figures.kills += 1
            key = point.split(":")[0] if point else "random"
            figures.killed_at[key] = figures.killed_at.get(key, 0) + 1
        figures.rounds += 1


def converge(world, most: int = 12) -> int:
    """Plain passes until `plan --detailed-exitcode` is 0; the passes it took."""
    for n in range(1, most + 1):
        one_pass(world)
        if world.reconcile("plan", "--detailed-exitcode").returncode == 0:
            return n
        time.sleep(0.5)
    raise AssertionError("did not converge:\n" + world.reconcile("plan").stdout)


def ours(world) -> list[psutil.Process]:
    """Live processes with a marker of this world (cwd in its data root)."""
    found = []
    for proc in world.processes():
        try:
            if proc.environ().get("RECONCILER_INSTANCE"):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def check(world, wanted: dict[str, int], figures: Figures) -> set[int]:
    """Fill in the figures for the end state; the pids of our servers no wanted record holds."""
    with world.store() as store:
        records = {r.name: r for r in store.roles()}
        # No server of this scenario ever crashes: every crash-like decision in
        # the log (over all rounds, not only the last generation's count) is
        # the reconciler's own interrupted work miscounted.
        miscounted = [e for e in store.events() if e.reason in _CRASH_REASONS]
    owned = {records[n].pid for n in wanted if n in records}
    extra = {p.pid for p in ours(world)} - owned
    figures.orphans_at_end = len(extra)
    figures.restarts_counted = sum(r.restarts for r in records.values()) + len(miscounted)
    figures.miscounted = [f"{e.role}: {e.kind} ({e.reason}: {e.detail})" for e in miscounted]
    if miscounted and os.environ.get("RECONCILER_KILL9_HISTORY"):
        with world.store() as store:
            history = store.events()
        for bad in miscounted:
            before = [e for e in history if e.role == bad.role and e.at <= bad.at][-10:]
            figures.miscounted.append("    history: " + " | ".join(
                f"{e.at:.2f} {e.kind} {e.reason} {e.detail}" for e in before))
    db = sqlite3.connect(world.state / "state.db")
    try:
        figures.integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    return extra


def all_serving(world, wanted: dict[str, int]) -> bool:
    return all(wait_for(lambda p=port: http_get(p, "/health")[0] == 200, 15)
               for port in wanted.values())
