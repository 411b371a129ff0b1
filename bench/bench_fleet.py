"""Benchmark: ``reconcile fleet`` for 1,000 nodes × 10 roles, and how it grows with nodes.

A fleet repository as one would write it: N NodeConfigs in three pools
(labels ``pool`` and ``vram``), 30 roles, ten per pool, placed by label
selectors (``match_labels``, ``In``, ``Gt``), so every node runs ten roles
(10·N placements), and the Models they serve. ``reconcile fleet`` reads and
validates every document, places every role, and plans every node offline
(``plan()`` per node, with its ledger).

Whole-process runs (start-up, imports, YAML, schemas, placement, planning,
rendering), best of ``--runs``, for 100 and 1,000 nodes. Goals: ≤ 2 s at
1,000 nodes, and growth from 100 to 1,000 nodes ≤ 11× (linear in nodes).
The time of each stage at 1,000 nodes is printed too, measured in-process.

Run: ``.venv/bin/python bench/bench_fleet.py [--runs 5]``; ``--devices``: 1,000 and
10,000 nodes, each with 8 CUDA devices, every role placed on devices (goal
≤ 10 s at 10,000 nodes; issue 20).

The load stage with devices (in-process, on the 2-core development machine at
load average ~1.7): 11.2–12.0 s at 10,000 nodes before issue 20's loading work,
2.4–2.6 s after (1,000 nodes: 1.1–1.4 s, 0.26–0.28 s) — libyaml composing in
C, ``schemafast``'s compiled schema check before ``jsonschema``, the fleet
checks per label set and role set, no cyclic garbage collection during the
load (docs/architecture.md). The whole ``--devices`` run at 10,000 nodes then
took 6.5 s with the planner's work of the same issue.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POOLS = ("a", "b", "c")
DEVICES = "  devices:\n" + "".join(
    f"    - {{id: \"cuda:{k}\", kind: cuda, memory: 20GB}}\n" for k in range(8))
SHA = "0" * 64


def write_fleet(folder: Path, nodes: int, devices: bool = False) -> None:
    """``devices``: each node declares 8 CUDA devices and every role asks for one (§7.1)."""
    folder.mkdir(parents=True)
    docs = []
    for i in range(nodes):
        pool = POOLS[i % 3]
        docs.append(f"""\
apiVersion: reconciler/v1
kind: NodeConfig
metadata:
  name: gpu-{i:04d}
  labels: {{pool: {pool}, vram: "{48 if i % 2 else 24}", zone: z{i % 7}}}
spec:
  allowed_ports: {{from: 8000, to: 8999}}
  memory_budget: 200GB
  serve_programs: {{llamacpp: llama-b11434}}
  run_as: {{uid: 1000, gid: 1000}}
""" + (DEVICES if devices else ""))
    for part in range(0, len(docs), 500):  # a manifest file holds at most 1 MiB
        (folder / f"nodes-{part:05d}.yaml").write_text("---\n".join(docs[part:part + 500]))
    models = [f"""\
apiVersion: reconciler/v1
kind: Model
metadata: {{name: m{j}}}
spec:
  format: gguf
  root: /srv/models/m{j}
  shards: [{{path: m{j}.gguf, size: {2_000_000_000 + j}, sha256: "{SHA}"}}]
""" for j in range(5)]
    (folder / "models.yaml").write_text("---\n".join(models))
    (folder / "programs.yaml").write_text(f"""\
apiVersion: reconciler/v1
kind: Program
metadata: {{name: llama-b11434}}
spec:
  runtime: llamacpp
  version: b11434
  root: /opt/llama.cpp
  entrypoint: llama-server
  files: [{{path: llama-server, size: 15245984, sha256: "{SHA}"}}]
""")
    roles = []
    for p, pool in enumerate(POOLS):
        for r in range(10):
            if r % 3 == 0:
                selector = f"match_labels: {{pool: {pool}}}"
            elif r % 3 == 1:
                selector = f"match_expressions: [{{key: pool, operator: In, values: [{pool}]}}]"
            else:
                selector = (f"match_labels: {{pool: {pool}}}\n"
                            "      match_expressions: [{key: vram, operator: Gt, values: ['8']}]")
            roles.append(f"""\
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {{name: {pool}-role-{r}}}
spec:
  runtime: llamacpp
  mode: managed
  model: m{r % 5}
  serve: {{port: {8000 + p * 10 + r}, ctx: 4096, extra_args: ["--threads", "4"]}}
  memory: {{kv: 1GB}}
  placement:
    node_selector:
      {selector}
""" + (("    devices: {count: 1}\n" if r % 4 else "    devices: {ids: [\"cuda:6\", \"cuda:7\"]}\n")
       if devices else ""))
    (folder / "roles.yaml").write_text("---\n".join(roles))
    (folder / "rollout.yaml").write_text(ROLLOUT)  # §13 staged as a fleet's changes are


#: Every role staged: zone z0 the canaries, then pool a, then the rest, gated.
ROLLOUT = """\
apiVersion: reconciler/v1
kind: Rollout
metadata: {name: everything}
spec:
  start: "2026-12-02T14:00:00Z"
  duration: 6h
  waves:
    - {name: canary, canary: true, node_selector: {match_labels: {zone: z0}}}
    - {name: pool-a, node_selector: {match_labels: {pool: a}}}
  gate:
    prometheus:
      url: http://prometheus.internal:9090
      query: (count(reconciler:node_healthy_revision{node=~"$nodes"} == 1) or vector(0)) >= bool $count
      bake: 15m
"""


def run_fleet(folder: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reconciler", "-f", str(folder), "fleet"],
                          capture_output=True, text=True, env=env)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"reconcile fleet failed:\n{done.stderr}")
    return took


def stages(folder: Path) -> list[tuple[str, float]]:
    """Where the time goes, in-process (imports already paid)."""
    from reconciler.fleet import fleetview
    from reconciler.manifests import loader
    from reconciler.repo import sources

    out = []
    t = time.perf_counter()
    files, _ = sources.read_manifests([str(folder)])
    out.append(("read files", time.perf_counter() - t))
    t = time.perf_counter()
    loaded = loader.load(files)
    out.append(("load: YAML, schemas, checks of every node", time.perf_counter() - t))
    t = time.perf_counter()
    view = fleetview.view(loaded.fleet)
    out.append(("place and plan every node offline", time.perf_counter() - t))
    t = time.perf_counter()
    fleetview.text(view)
    out.append(("render", time.perf_counter() - t))
    return out


def devices_main(runs: int) -> int:
    """Issue 20: 10,000 nodes × 10 roles × 8 devices ≤ 10 s (one whole-process run each)."""
    with tempfile.TemporaryDirectory(prefix="bench-fleet-devices-") as tmp:
        for nodes in (1000, 10_000):
            folder = Path(tmp) / f"n{nodes}"
            write_fleet(folder, nodes, devices=True)
            took = min(run_fleet(folder) for _ in range(runs))
            goal = f"   goal ≤ 10 s: {'met' if took <= 10 else 'MISSED'}" if nodes == 10_000 else ""
            print(f"reconcile fleet with devices, {nodes:,} nodes × 10 roles × 8 devices: "
                  f"{took:6.2f} s (best of {runs}){goal}")
        print("where the time goes at 10,000 nodes (in-process):")
        for name, took in stages(Path(tmp) / "n10000"):
            print(f"  {name:<44} {took:6.3f} s")
        print(f"(load average {os.getloadavg()[0]:.2f})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--devices", action="store_true",
                        help="10,000 nodes × 10 roles × 8 devices instead (issue 20)")
    args = parser.parse_args()
    if args.devices:
        return devices_main(args.runs)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        small, big = Path(tmp) / "n100", Path(tmp) / "n1000"
        write_fleet(small, 100)
        write_fleet(big, 1000)
        run_fleet(small)  # warm the bytecode cache
        t100 = min(run_fleet(small) for _ in range(args.runs))
        t1000 = min(run_fleet(big) for _ in range(args.runs))
        growth = t1000 / t100
        print(f"reconcile fleet, 100 nodes × 10 roles:   {t100:6.3f} s (best of {args.runs})")
        print(f"reconcile fleet, 1,000 nodes × 10 roles: {t1000:6.3f} s   goal ≤ 2 s: "
              f"{'met' if t1000 <= 2.0 else 'MISSED'}")
        print(f"growth 100 → 1,000 nodes: {growth:.1f}×   goal ≤ 11×: "
              f"{'met' if growth <= 11 else 'MISSED'}")
        print("where the time goes at 1,000 nodes (in-process):")
        for name, took in stages(big):
            print(f"  {name:<44} {took:6.3f} s")
        print(f"(load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
