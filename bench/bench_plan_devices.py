"""Benchmark the planner with devices (§7.1): N roles on N/10 nodes of 8 devices each.

Each node's share is planned as a node plans it (one ``plan()`` per node, as
``reconcile fleet`` and each node's own pass do). Per node, 10 llama.cpp roles
placed on devices: 5 in sync on the device of their launch, 2 missing
(``count: 1``: best fit), 1 missing on two fixed devices with a split, 1
crashed and due for a restart (it keeps its device), 1 launched from an older
spec (a restart that keeps its device). 8 devices of 80 GB; 20 GB per role.

Timed: the sum of every node's ``plan()``, best of ``--runs`` after the first:
what each pass pays while the manifests stay as they are. The first pass also
works out every role's launch (``planner/launches.py`` keeps them across
passes); it is printed beside it. Printed: µs per
role at each size and the growth from 1k to 10k roles (100 → 1,000 nodes).
Goal (issue 20): ≤ 10 µs per role at 10k roles, growth ≤ 11×.

Where the time goes (py-spy on one node's world planned over and over, the
collector off, round 3): building each role's view of itself (``_role``, now
``stages/views.view``) ~12 %; the ladder's rungs ~15 %; building the decision
values (``Decision``, ``Draft``, the keyword plumbing of ``draft``/``start``, and
the ``evolve`` of a claim whose devices placement picked) ~30 % (round 4: a
Decision of 15 fields and its verb's small payload; ``Decision.placed``);
placement (the host ledger, the device picks) ~15 %; the rest per node (tables, the order of execution). ``--where`` prints
two more figures: one node's world planned n/10 times over (no working set to
speak of: the compute), and the passes with the collector off. At 10k roles the
working set of 1,000 distinct nodes (~2.5 µs per role) and the collector
(~0.6 µs) come on top of the compute (~14 µs per role). Before the memo of
launches (round 3), argv and digests were worked out on every pass: ~40 % of
the time. Round 4 (one pass at 1k roles, traced: load-independent): ~1,610
bytecodes and ~43.5 Python calls per role; the view ~220 bytecodes, the
``Decision``s' init ~138 (1.2 per role: a placed claim is built twice), the
ledger's ``place`` ~100, the role's ``Role`` ~80, the ladder ~80; callgrind
per role per pass 138.5K → 130.9K instructions after the Role's launch fields
became slots and the hot runtime lookups read the table. Round 4, session 3
(cachegrind, the passes after the first, 1k roles): 145K → ~105K instructions
per role per pass (round 3's tree: ~158K; at 10k roles ~112K) once decisions,
payloads, targets and the stage values were built by position (``core/positional``: attrs' frozen
``__init__`` made a call of ``object.__setattr__`` per field, ~24K instructions
a ``Decision``). Stage by stage: the view ~31K, the ladder ~40K, placement
~32K, the rest ~7K. What is left is the interpreter itself, spread thin (~37K
in the eval loop, ~12K in ~50 Python calls per role): ≤ 10 µs needs fewer
calls per role, not faster values. Round 4, session 4: a keep's draft (and a
claim's that placement decides) handed out again while its fields are the same
(``rungs._STEADY``): ~92K instructions per role per pass at 1k and 10k roles
(round 3's tree ~158K: 58 %). On a quiet machine where round 3's tree measures
the issue's 17 µs per role at 10k (15.4–15.5 at 1k, 16.9–17.2 at 10k): 10.3–10.4
µs at 1k, 11.7–11.9 at 10k. One node's world planned 1,000 times over (the
compute) is ~9.9 µs; the rest is memory: 1,000 distinct nodes' roles, records,
observations and memo entries cold in the caches (~71 misses of a 2 MB cache per
role per pass, simulated; round 3 ~80) and the collector's young collections
(0.3–0.8 µs per role with it off).

Run: ``.venv/bin/python bench/bench_plan_devices.py [--sizes 1000 10000] [--runs 5] [--where]``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from pathlib import Path

from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
    NodeConfig,
    PortRange,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.devices import Assignment, DeviceRequest
from reconciler.core.observed import flat_record
from reconciler.core.observed import (
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
)
from reconciler.planner import identity
from reconciler.planner.plan import forget, plan
from reconciler.planner.launches import device_env

from bench_plan import verdict  # the same goal, judged the same way (bench/ is the script's folder)

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, for tests/support
from tests.support.worlds import CTX, ENVIRON, GB, LLAMA_PROGRAM, QWEN, gpus  # noqa: E402

NOW = 100_000.0
MODEL = QWEN
NODE = NodeConfig(allowed_ports=PortRange(start=10_000, end=60_000), serve_programs=LLAMA_PROGRAM,
                  devices=gpus(*[80 * GB] * 8))
KINDS = ("in-sync",) * 5 + ("missing", "missing", "split", "crashed", "spec-changed")


def node_world(first: int, devices: bool = True) -> tuple[Desired, Observed, Remembered]:
    """One node's share; ``devices=False``: the same roles host-only (the baseline)."""
    node = NODE if devices else NodeConfig(allowed_ports=NODE.allowed_ports,
                                           serve_programs=NODE.serve_programs)
    specs, observations, records = [], [], []
    launcher = identity.Launcher(node, dict(ENVIRON), CTX.data_root)
    for k, kind in enumerate(KINDS):
        name, port = f"r{first + k:05d}", 20_000 + k
        request = (DeviceRequest(ids=("cuda:6", "cuda:7"), split=(3.0, 1.0)) if kind == "split"
                   else DeviceRequest(count=1))
        spec = RoleSpec(name=name, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                        serve=ServeSpec(port=port, ctx=4096), memory=MemorySpec(weights=20 * GB),
                        devices=request if devices else None)
        specs.append(spec)
        if kind in ("missing", "split"):
            continue
        device = f"cuda:{k % 6}"
        launched = spec if kind != "spec-changed" else RoleSpec(
            name=name, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
            serve=ServeSpec(port=port, ctx=2048), memory=spec.memory, devices=spec.devices)
        assignment = Assignment(ids=(device,) if devices else ())
        argv = launcher.argv(launched, {"qwen": MODEL}, assignment)
        launch = launcher.launch(argv, identity.instance_id(spec), None,
                                 device_env(spec.runtime, assignment))
        pid = 100_000 + first + k
        alive = kind != "crashed"
        observations.append(RoleObservation(
            name=name, process=ProcessFacts(pid=pid, create_time=1.0, alive=alive, owned=alive),
            probe=ProbeFacts(health=Health.UP, detail="healthy") if alive else None))
        records.append(flat_record(
            name=name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
            mode=spec.mode, port=port, pid=pid, create_time=1.0, launch_digest=launch.digest,
            launch_argv=launch.argv, healthy_since=None if not alive else NOW - 500,
            exited_at=NOW - 500 if not alive else None, restarts=1 if not alive else 0,
            devices=((device, 20 * GB),) if devices else ()))
    desired = Desired(roles=tuple(specs), models=(MODEL,), node=node)
    return desired, Observed(roles=tuple(observations)), Remembered(roles=tuple(records))


def measure(n: int, runs: int, devices: bool = True, same: bool = False
            ) -> tuple[float, float, collections.Counter]:
    """(first pass, best later pass, verbs); ``same``: one node's world, n/10 times over."""
    worlds = ([node_world(0, devices)] * (n // len(KINDS)) if same
              else [node_world(first, devices) for first in range(0, n, len(KINDS))])
    forget()  # the first pass works out every launch (every memo of the planner emptied)
    times, results = [], []
    for _ in range(runs):
        started = time.perf_counter()
        results = [plan(d, o, r, CTX, NOW) for d, o, r in worlds]
        times.append(time.perf_counter() - started)
    verbs = collections.Counter(f"{d.verb}/{d.reason}" for p in results for d in p.decisions)
    return times[0], min(times[1:] or times), verbs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--verbs", action="store_true", help="print the plans' verbs per size")
    parser.add_argument("--baseline", action="store_true",
                        help="also time the same roles host-only (what the devices cost)")
    parser.add_argument("--where", action="store_true",
                        help="also time one node's world planned n/10 times over, and the "
                             "passes with the collector off (the working set's share, the GC's)")
    args = parser.parse_args()
    seconds = {}
    for n in args.sizes:
        if args.baseline:
            _, took, _ = measure(n, args.runs, devices=False)
            print(f"  host-only baseline, {n:>6} roles: {took * 1000:8.1f} ms = "
                  f"{took / n * 1e6:6.1f} µs per role")
        first, took, verbs = measure(n, args.runs)
        seconds[n] = took
        print(f"plan() of {n:>6} roles on {n // len(KINDS):>5} nodes × 8 devices: "
              f"{took * 1000:8.1f} ms = {took / n * 1e6:6.1f} µs per role"
              f"   (first pass, every launch worked out: {first / n * 1e6:.1f} µs per role)")
        if args.where:
            _, alone, _ = measure(n, args.runs, same=True)
            gc.disable()
            try:
                _, quiet, _ = measure(n, args.runs)
            finally:
                gc.enable()
            print(f"  one node's world, {n // len(KINDS)} times over: {alone / n * 1e6:6.1f} µs per "
                  f"role; the collector off: {quiet / n * 1e6:6.1f} µs per role")
        if args.verbs:
            print("  " + ", ".join(f"{k} {v}" for k, v in sorted(verbs.items())))
    return 0 if verdict(seconds) else 1


if __name__ == "__main__":
    sys.exit(main())
