"""``make mutants``: break the pure core on purpose, one rule at a time, and see the tests fail.

Each mutant of ``tests/mutation/catalogue.py`` is one hand-made single change
of the pure core (a rule removed, a boundary moved, a field dropped). The
runner copies the repository to a scratch directory (the working tree is never
touched), applies one mutant there, and runs the fast suite against it:

1. the test directories that cover the mutated module, ``-x`` (fast);
2. for a mutant that survived, the whole fast suite, to be sure.

A mutant is *killed* when the suite fails (a failing test, an import or
collection error, or a timeout) and *survived* when it passes. Hypothesis runs
derandomised (profile ``mutants``, ``tools/mutants_profile.py``) so two runs
give the same score.

Run: ``.venv/bin/python tools/mutants.py [--only TEXT] [--jobs N] [--repo DIR]``;
``--list`` prints the catalogue. Exit status 1 when the score is below
``--min-score`` (default 95) or a mutant no longer applies.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.mutation.catalogue import MUTANTS  # noqa: E402
from tests.mutation.mutant import Mutant  # noqa: E402

#: The fast suite, without the catalogue's own check (which every mutant fails by design).
FAST = ["-m", "not e2e and not mlx", "--ignore=tests/mutation"]
IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".hypothesis",
                                 ".pytest_cache", "*.egg-info")


def scratch_copy(repo: Path) -> Path:
    """The repository's sources and tests in a fresh directory (no venv, no caches)."""
    where = Path(tempfile.mkdtemp(prefix="mutants-")) / "repo"
    shutil.copytree(repo, where, ignore=IGNORED)
    return where


def pytest(copy: Path, targets: list[str], timeout: float) -> tuple[bool, str]:
    """Run the fast suite in ``copy``: (passed, the first failure's line)."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutants", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(HERE)}
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "-p", "mutants_profile", *FAST, *targets]
    try:
        done = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timeout after {timeout:.0f} s"
    if done.returncode == 0:
        return True, ""
    lines = (done.stdout + done.stderr).splitlines()
    first = next((ln for ln in lines if ln.startswith(("FAILED", "ERROR"))), None)
    return False, first or (lines[-1] if lines else f"exit {done.returncode}")


def run_one(copy: Path, mutant: Mutant, timeout: float) -> tuple[str, str]:
    """Apply ``mutant`` in ``copy``, run the suite, restore: (verdict, evidence)."""
    path = copy / mutant.path
    if not path.is_file():
        return "stale", f"{mutant.path}: no such module"
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return "stale", f"{mutant.path}: the original text occurs {original.count(mutant.old)}×"
    path.write_text(original.replace(mutant.old, mutant.new))
    try:
        passed, why = pytest(copy, list(mutant.tests), timeout)
        if passed:
            passed, why = pytest(copy, ["tests"], timeout)
            if not passed:
                why = f"(whole fast suite) {why}"
        return ("survived", "") if passed else ("killed", why)
    finally:
        path.write_text(original)


def check_copy(copy: Path) -> None:
    """The copy's own package is the one imported, and its fast suite passes unmutated."""
    probe = subprocess.run([sys.executable, "-c", "import reconciler; print(reconciler.__file__)"],
                           cwd=copy, capture_output=True, text=True, check=True)
    if not Path(probe.stdout.strip()).is_relative_to(copy):
        raise SystemExit(f"the copy imports {probe.stdout.strip()}, not its own package")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[],
                        help="run the mutants whose name contains TEXT (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="copies run side by side")
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree to mutate")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test run")
    parser.add_argument("--min-score", type=float, default=95.0)
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or any(t in m.name for t in args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.name:40} {m.path}: {m.breaks}")
        return 0
    copies = [scratch_copy(args.repo) for _ in range(max(args.jobs, 1))]
    for copy in copies:
        check_copy(copy)
    passed, why = pytest(copies[0], ["tests"], args.timeout)
    if not passed:
        raise SystemExit(f"the unmutated fast suite fails: {why}")
    started = time.monotonic()
    results: dict[str, tuple[str, str]] = {}
    free = list(copies)

    def job(mutant: Mutant) -> tuple[Mutant, tuple[str, str]]:
        copy = free.pop()
        try:
            return mutant, run_one(copy, mutant, args.timeout)
        finally:
            free.append(copy)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(copies)) as pool:
        for mutant, (verdict, evidence) in pool.map(job, chosen):
            results[mutant.name] = (verdict, evidence)
            print(f"{verdict:8} {mutant.name:40} {evidence}", flush=True)
    for copy in copies:
        shutil.rmtree(copy.parent, ignore_errors=True)
    killed = [n for n, (v, _) in results.items() if v == "killed"]
    survived = [m for m in chosen if results[m.name][0] == "survived"]
    stale = [n for n, (v, _) in results.items() if v == "stale"]
    counted = len(killed) + len(survived)
    score = 100.0 * len(killed) / counted if counted else 0.0
    print(f"\n{len(killed)} killed, {len(survived)} survived, {len(stale)} stale "
          f"of {len(chosen)} mutants in {time.monotonic() - started:.0f} s: "
          f"score {score:.1f} %")
    for m in survived:
        print(f"  survived {m.name}: {m.breaks}")
    for name in stale:
        print(f"  stale    {name}: {results[name][1]}")
    return 0 if score >= args.min_score and not stale else 1


if __name__ == "__main__":
    raise SystemExit(main())
