"""Benchmark: ``reconcile --once`` on a converged machine with 20 real servers.

Starts 20 real llama.cpp servers (the testbed's tiny model) through the
reconciler, waits until they answer, then times whole-process runs of
``reconcile --once`` (which then plans and does nothing) against
``python -c "import httpx, yaml, jsonschema, psutil, attrs"`` — the floor any
Python tool with these dependencies pays — in the same run. Goal: ≤ 1.5×.

Both run from bytecode, as an installed reconciler and its installed
libraries do: each gets a warm ``PYTHONPYCACHEPREFIX`` of its own and
``PYTHONDONTWRITEBYTECODE`` is dropped from their environment. With that
variable set (as in some development shells) every run would compile the
reconciler's sources again while the floor's libraries come precompiled from
site-packages; that ratio is printed too, for comparison, not as the goal.

Run it on an otherwise idle machine: the twenty servers answer the probes of
every ``--once`` run, so load from elsewhere slows that run more than the
floor's imports (the load average is printed with the figures).

With ``--pinned`` the node runs its servers from a ``kind: Program`` that pins the testbed's
``llama-server`` by sha256 (§14) instead of naming its path: the same goal, ≤ 1.5×
(issue 29: a Program-pinned node is no slower than today).

Run: ``.venv/bin/python bench/bench_once.py [--roles 20] [--runs 7] [--pinned]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA = TESTBED / "bin" / "llama-server"
GGUF = TESTBED / "models" / "tiny.gguf"
BASE_PORT = 31000


def write_manifests(root: Path, roles: int, pinned: bool = False) -> Path:
    manifests = root / "manifests"
    manifests.mkdir()
    digest = hashlib.sha256(GGUF.read_bytes()).hexdigest()
    program = "llama-pinned" if pinned else str(LLAMA)
    docs = [textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: bench}}
        spec:
          allowed_ports: {{from: {BASE_PORT}, to: {BASE_PORT + roles}}}
          serve_programs: {{llamacpp: {program}}}
          run_as: {{uid: 65534, gid: 65534}}
          stop_grace: 2s
        """), textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          root: {GGUF.parent}
          shards: [{{path: {GGUF.name}, size: {GGUF.stat().st_size}, sha256: {digest}}}]
        """)]
    if pinned:
        docs.append(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Program
            metadata: {{name: llama-pinned}}
            spec:
              runtime: llamacpp
              version: b11434
              root: {LLAMA.parent}
              entrypoint: {LLAMA.name}
              files: [{{path: {LLAMA.name}, size: {LLAMA.stat().st_size}, sha256: {hashlib.sha256(LLAMA.read_bytes()).hexdigest()}}}]
            """))
    for i in range(roles):
        docs.append(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: role-{i:02d}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: tiny
              serve: {{port: {BASE_PORT + i}, ctx: 256, extra_args: ["--threads", "1"]}}
            """))
    (manifests / "all.yaml").write_text("---\n".join(docs))
    return manifests


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pinned", action="store_true",
                        help="run the servers from a Program pinning llama-server by sha256 (§14)")
    args = parser.parse_args()
    with servers_root("bench_once") as root:
        manifests = write_manifests(root, args.roles, pinned=args.pinned)
        env = {**os.environ, "RECONCILER_STATE_DIR": str(root / "state")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        source_env = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
        source_env.pop("PYTHONPYCACHEPREFIX")
        once = [sys.executable, "-m", "reconciler", "-f", str(manifests), "--once"]
        first = subprocess.run(once, capture_output=True, text=True, env=env)
        if first.returncode != 0:
            print(first.stdout, first.stderr)
            return 1
        wait_in_sync(once, env, 60)
        floor = [sys.executable, "-c", "import httpx, yaml, jsonschema, psutil, attrs"]
        timed(floor, env)  # the floor's bytecode cache, warm like the reconciler's
        a, b = compare(once, floor, env, args.runs)
        how = "from a pinned Program" if args.pinned else "by path"
        print(f"reconcile --once, {args.roles} servers ({how}) in sync: median {a * 1000:.0f} ms "
              f"over {args.runs} runs")
        print(f"python -c 'import httpx, yaml, jsonschema, psutil, attrs': median {b * 1000:.0f} ms")
        print(f"ratio: {a / b:.2f}x (goal <= 1.5x); load average {os.getloadavg()[0]:.2f}")
        a, b = compare(once, floor, source_env, args.runs)
        print(f"without bytecode (PYTHONDONTWRITEBYTECODE=1): {a * 1000:.0f} ms vs "
              f"{b * 1000:.0f} ms, ratio {a / b:.2f}x (not the goal: see the docstring)")
        return 0


@contextlib.contextmanager
def servers_root(tool: str) -> Iterator[Path]:
    """A scratch directory for one run's state and servers (exit when the testbed's
    llama-server is missing); at the end every process under it is killed and it is removed."""
    if not LLAMA.exists():
        sys.exit(f"{tool}: {LLAMA} missing: run `bash testbed/setup.sh`")
    root = Path(tempfile.mkdtemp(prefix="reconciler-bench-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        _stop_all(root)
        shutil.rmtree(root, ignore_errors=True)


def wait_in_sync(once: list[str], env: dict[str, str], seconds: float) -> bool:
    """Run ``once`` until a pass finds every server answering and in sync (or time is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _in_sync(subprocess.run(once, capture_output=True, text=True, env=env).stdout):
            return True
        time.sleep(0.5)
    return False


def timed_in_sync(once: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds of one whole-process pass, and its plan; the pass must find all in sync."""
    t, out = timed(once, env)
    assert out.returncode == 0 and _in_sync(out.stdout), out.stdout + out.stderr
    return t, out.stdout


def medians(runs: int, *cases: Callable[[], float]) -> list[float]:
    """Median seconds of each case over ``runs`` rounds; in each round every case runs once,
    one after the other, so that load from elsewhere hits them alike."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(runs):
        for seconds, case in zip(times, cases):
            seconds.append(case())
    return [statistics.median(seconds) for seconds in times]


def _in_sync(plan_text: str) -> bool:
    """Every role kept and running: not starting, not refused (a port someone else holds)."""
    return ("No changes" in plan_text and "starting" not in plan_text
            and "need an operator" not in plan_text)


def compare(once: list[str], floor: list[str], env: dict[str, str], runs: int
            ) -> tuple[float, float]:
    """Median seconds of ``once`` and of ``floor``, interleaved so load hits both alike."""
    a, b = medians(runs, lambda: timed_in_sync(once, env)[0], lambda: timed(floor, env)[0])
    return a, b


def _stop_all(root: Path) -> None:
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.cwd().startswith(str(root)):
                os.killpg(proc.pid, signal.SIGKILL)
        except (psutil.Error, OSError):
            continue


if __name__ == "__main__":
    raise SystemExit(main())
