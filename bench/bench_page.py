"""Benchmark the status page (§11): a node with 100 roles, from the pass's values to HTML.

The node is ``bench_plan.py``'s mixed world at 100 roles (llama.cpp, mlx-lm
and Ollama roles in sync, missing, crashed, in backoff, to restart, removed,
stopped, adopted …), planned once; its records are written to a real state
store in a temporary directory with 100 events (not timed).

Timed, best of ``--runs``: ``snapshot.take`` (reads the store: records,
events, the commits that started each role; builds the rows, the ledger's
bar) and ``page.render`` (the whole page, as ``GET /`` serves it), and the
render alone. Goal (issue 22): ≤ 50 ms for the whole page of 100 roles.

Run: ``.venv/bin/python bench/bench_page.py [--roles 100] [--runs 20]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_plan  # noqa: E402

from reconciler.core.events import Event, EventKind  # noqa: E402
from reconciler.engine.loop import PassResult  # noqa: E402
from reconciler.planner.plan import plan  # noqa: E402
from reconciler.report import page, snapshot  # noqa: E402
from reconciler.state.store import Store  # noqa: E402

GOAL_MS = 50.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    desired, observed, remembered = bench_plan.world(args.roles)
    the_plan = plan(desired, observed, remembered, bench_plan.CTX, bench_plan.NOW)
    result = PassResult(desired=desired, observed=observed, plan=the_plan,
                        git_commit="0123456789abcdef0123", started=bench_plan.NOW)
    with tempfile.TemporaryDirectory() as state, Store(state) as store:
        for record in remembered.roles:
            store.put_role(record)
        for i in range(snapshot.EVENTS_SHOWN):
            d = the_plan.decisions[i % len(the_plan.decisions)]
            store.add_event(Event(role=d.role, kind=EventKind.of(d.verb), reason=str(d.reason),
                                  detail=d.why or d.detail, ok=True, git_commit="0123456789",
                                  at=bench_plan.NOW + i))
        whole = render = float("inf")
        html = ""
        for _ in range(args.runs):
            t0 = time.perf_counter()
            taken = snapshot.take(result, store, applied=True)
            t1 = time.perf_counter()
            html = page.render(taken)
            t2 = time.perf_counter()
            whole, render = min(whole, t2 - t0), min(render, t2 - t1)
    rows = html.count('<tr class="role')
    print(f"status page of {rows} roles, {len(taken.events)} events, "
          f"{len(taken.bars[0].holdings)} memory holdings: {len(html) / 1024:.0f} KiB of HTML")
    print(f"take + render: {whole * 1000:6.1f} ms   (render alone: {render * 1000:5.1f} ms, "
          f"best of {args.runs})")
    ok = whole * 1000 <= GOAL_MS
    print(f"goal ≤ {GOAL_MS:g} ms for {args.roles} roles: {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
