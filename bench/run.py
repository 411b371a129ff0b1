"""``make bench``: every benchmark, one after another, each printing its own figures.

Each benchmark measures its ratio within one run (against ``sha256sum``, a
bare import, one probe, supervisord, the same planner at a tenth of the
size, or the same server without the router, ``curl -o``, ``curl -o`` + ``unzip``), so the figures mean the same on any machine. Run one alone for its options: ``.venv/bin/python bench/bench_watch.py --help``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    ("model hashing (issue: models add/verify)", ["bench_hash.py"]),
    ("observe 200 servers (issue: observing real servers)", ["bench_observe.py"]),
    ("--once with 20 servers in sync (issue: reconcile --once)", ["bench_once.py"]),
    ("watch vs supervisord (issue: reconcile watch)", ["bench_watch.py"]),
    ("reconcile fleet, 1,000 nodes × 10 roles (issue 12: fleet)", ["bench_fleet.py"]),
    ("plan() of 1k and 10k roles (issue: planner at scale)", ["bench_plan.py"]),
    ("plan() with devices, 10k roles on 1,000 nodes × 8 devices (issue 20: devices)",
     ["bench_plan_devices.py", "--baseline"]),
    ("reconcile fleet --rollout, 1,000 nodes × 10 roles (issue 30: rollouts)",
     ["bench_rollout.py"]),
    ("reconcile fleet with devices, 10,000 nodes (issue 20: devices)",
     ["bench_fleet.py", "--devices", "--runs", "1"]),
    ("router vs direct llama-server (issue 13: the router)", ["bench_router.py"]),
    ("the status page of 100 roles (issue 22: status page)", ["bench_page.py"]),
    ("Model fetch vs curl -o, resume, --once (issue 21: weights by commit)", ["bench_fetch.py"]),
    ("a Program's check at start vs sha256sum (issue 29: programs by digest)",
     ["bench_programs.py"]),
    ("--once with 20 servers from a pinned Program (issue 29: no slower than today)",
     ["bench_once.py", "--pinned"]),
    ("a Program's release archive: fetch + unpack vs curl -o + unzip (issue 29)",
     ["bench_program_fetch.py"]),
]


def main() -> int:
    failed = []
    for title, argv in BENCHES:
        print(f"\n=== {title}", flush=True)
        started = time.monotonic()
        code = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]]).returncode
        print(f"--- {argv[0]}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(argv[0])
    if failed:
        print(f"\nfailed to run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
