"""Benchmark the planner at scale: ``plan()`` over 1k and 10k roles in a mixed world.

The world (built once per size, not timed) mixes every kind of role the ladder
meets, in fixed proportions per 20 roles: llama.cpp and mlx-lm servers in sync,
missing, crashed (restart due, and still in backoff), launched from an older
spec (restart), removed (a running managed server to stop, an adopted record
to forget), stopped by ``state: stopped``, adopted and answering, and Ollama
roles spread over several Ollama servers (10 tags each; one resident, one to
load). One role in 25 excludes its neighbour, and the memory budget leaves
room for all but the last few claims, so the ledger places, excludes and
refuses.

Timed: the public ``plan(desired, observed, remembered, ctx, now)``, best of
``--runs`` after the first: what each pass of ``reconcile watch`` pays while the
manifests stay as they are. The first pass also works out every role's launch
(argv, digest: ``planner/launches.py`` keeps them across passes); it is printed
beside it. Printed: µs per role at each size and the growth of the whole
plan's time from 1k to 10k roles (10× the roles; 10× is linear).
Goal (issue: planner at scale): ≤ 10 µs per role at 10k, growth ≤ 11×.

Run: ``.venv/bin/python bench/bench_plan.py [--sizes 1000 10000] [--runs 5]``;
``--replicas 3 --sizes 3000 30000``: 10,000 roles of three instances each (§12), the
same mix over instances (a spec-changed instance is held by the rolling update).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from reconciler.planner import identity
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    NodeConfig,
    PortRange,
    RoleSpec,
    Runtime,
    ServeSpec,
    WantedState,
)
from reconciler.core.observed import flat_record
from reconciler.core.observed import (
    Health,
    ModelCheck,
    ModelState,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
)
from reconciler.planner.plan import forget, plan

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, for tests/support
from tests.support.worlds import CTX, ENVIRON, GB, QWEN, SERVE_PROGRAMS  # noqa: E402

NOW = 100_000.0
FIRST_PORT = 20_000
OLLAMA_FIRST_PORT = 11_000
TAGS_PER_OLLAMA = 10
PROGRAMS = SERVE_PROGRAMS

#: What role ``i`` is, by ``i % 20``.
KINDS = (
    "in-sync", "in-sync", "in-sync", "in-sync", "in-sync", "in-sync", "in-sync",
    "mlx-in-sync", "missing", "mlx-missing", "crashed", "backoff", "spec-changed",
    "removed", "removed-adopted", "state-stopped", "adopted", "ollama-resident",
    "ollama-load", "in-sync",
)


def models(n: int) -> tuple[ModelSpec, ...]:
    out = [
        QWEN,
        ModelSpec(name="mlxq", format=ModelFormat.MLX, root="/m/mlxq",
                  shards=(ModelFile(path="w.safetensors", sha256="1" * 64, size=GB),)),
    ]
    for i in range(n):
        if KINDS[i % 20].startswith("ollama"):
            out.append(ModelSpec(name=f"tag{i}", format=ModelFormat.OLLAMA,
                                 source=ModelSourceInfo(ollama_tag=f"m{i}:7b")))
    return tuple(sorted(out, key=lambda m: m.name))


def _name(i: int, replicas: int) -> str:
    """Role ``i``'s name; with ``replicas`` (§12), instance ``i % replicas`` of group ``i // replicas``."""
    if replicas == 1:
        return f"r{i:05d}"
    return f"r{i // replicas:05d}" + (f"/{i % replicas}" if i % replicas else "")


def world(n: int, replicas: int = 1):
    """Desired, observed and remembered for ``n`` roles (plus the removed ones' records);
    ``replicas``: the roles are instances, ``replicas`` to a group (§12, consecutive ports)."""
    node = NodeConfig(allowed_ports=PortRange(start=10_000, end=60_000),
                      serve_programs=PROGRAMS)
    all_models = models(n)
    by_name = {m.name: m for m in all_models}
    specs, observations, records = [], [], []
    ollama_tags: dict[int, list[str]] = collections.defaultdict(list)
    ollama_roles: list[tuple[str, int, str]] = []
    holding = claiming = 0
    for i in range(n):
        kind, name, port = KINDS[i % 20], _name(i, replicas), FIRST_PORT + i
        runtime = Runtime.MLX_LM if kind.startswith("mlx") else Runtime.LLAMACPP
        model = "mlxq" if runtime is Runtime.MLX_LM else "qwen"
        if kind.startswith("ollama"):
            runtime, model = Runtime.OLLAMA, f"tag{i}"
            port = OLLAMA_FIRST_PORT + i // (20 * TAGS_PER_OLLAMA // 2)
        excludes = frozenset({_name(i + 1, replicas)}) if i % 25 == 0 and i + 1 < n else frozenset()
        spec = RoleSpec(
            name=name, runtime=runtime,
            mode=Mode.ADOPTED if kind in ("adopted", "removed-adopted") else Mode.MANAGED,
            model=model, serve=ServeSpec(port=port, ctx=4096 if runtime is Runtime.LLAMACPP else None),
            memory=MemorySpec(weights=GB, kv=GB // 2), excludes=excludes,
            state=WantedState.STOPPED if kind == "state-stopped" else WantedState.RUNNING,
            keep_alive=300.0 if runtime is Runtime.OLLAMA else None,
            replicas=replicas if runtime is not Runtime.OLLAMA else 1,
        )
        footprint = spec.memory.footprint
        pid = 100_000 + i
        live = ProcessFacts(pid=pid, create_time=1.0, alive=True, owned=True)
        up = ProbeFacts(health=Health.UP, detail="healthy")
        launch = identity.launch(spec, by_name, node, dict(ENVIRON), CTX.data_root)

        def record(**kw) -> RoleRecord:
            base = dict(name=name, instance_id=identity.instance_id(spec), runtime=runtime,
                        mode=spec.mode, port=port, create_time=1.0, healthy_since=NOW - 500,
                        reserved=footprint)
            if launch is not None:
                base.update(launch_digest=launch.digest, launch_argv=launch.argv)
            return flat_record(**{**base, **kw})

        if kind.startswith("ollama"):
            tag = by_name[model].ollama_tag
            assert tag is not None
            ollama_tags[port].append(tag)
            ollama_roles.append((name, port, tag))
            if kind == "ollama-resident":
                records.append(record(we_loaded=True, model_tag=tag))
                holding += footprint
            else:
                claiming += footprint
        elif kind in ("in-sync", "mlx-in-sync", "state-stopped", "removed"):
            observations.append(RoleObservation(name=name, process=live, probe=up))
            records.append(record(pid=pid))
            holding += footprint if kind in ("in-sync", "mlx-in-sync") else 0
        elif kind in ("missing", "mlx-missing"):
            claiming += footprint
        elif kind in ("crashed", "backoff"):
            dead = ProcessFacts(pid=pid, create_time=1.0, alive=False, owned=False)
            observations.append(RoleObservation(name=name, process=dead))
            exited = NOW - (500 if kind == "crashed" else 1)
            records.append(record(pid=pid, restarts=1, exited_at=exited, healthy_since=None))
            holding += footprint
        elif kind == "spec-changed":
            old = identity.launch(
                RoleSpec(name=name, runtime=runtime, mode=spec.mode, model=model,
                         serve=ServeSpec(port=port, ctx=2048)),
                by_name, node, dict(ENVIRON), CTX.data_root)
            assert old is not None
            observations.append(RoleObservation(name=name, process=live, probe=up))
            records.append(record(pid=pid, launch_digest=old.digest, launch_argv=old.argv))
            holding += footprint
        elif kind == "adopted":
            observations.append(RoleObservation(name=name, probe=up))
            holding += footprint
        elif kind == "removed-adopted":
            records.append(record(mode=Mode.ADOPTED, reserved=0))
        if kind not in ("removed", "removed-adopted"):
            specs.append(spec)
    for name, port, _ in ollama_roles:
        tags = tuple(ollama_tags[port])
        resident = tuple(t for k, t in enumerate(tags) if k % 2 == 0)
        observations.append(RoleObservation(name=name, probe=ProbeFacts(
            health=Health.UP, listed_models=tags, resident_models=resident)))
    # Room for everything held and all but the last ~2% of the roles' claims
    # (the excluded ones, refused, free some of that: about 1% stay unplaceable).
    budget = holding + claiming - max(n // 50, 1) * (GB + GB // 2)
    node = NodeConfig(allowed_ports=node.allowed_ports, serve_programs=PROGRAMS,
                      memory_budget=budget)
    desired = Desired(roles=tuple(specs), models=all_models, node=node)
    checks = tuple(ModelCheck(name=m.name, state=ModelState.VERIFIED) for m in all_models)
    observed = Observed(roles=tuple(observations), models=checks)
    return desired, observed, Remembered(roles=tuple(records))


def measure(n: int, runs: int, replicas: int = 1) -> tuple[float, float, collections.Counter]:
    desired, observed, remembered = world(n, replicas)
    forget()  # the first pass works out every launch (every memo of the planner emptied)
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = plan(desired, observed, remembered, CTX, NOW)
        times.append(time.perf_counter() - started)
    assert result is not None
    verbs = collections.Counter(f"{d.verb}/{d.reason}" for d in result.decisions)
    return times[0], min(times[1:] or times), verbs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--verbs", action="store_true", help="print the plan's verbs per size")
    parser.add_argument("--replicas", type=int, default=1,
                        help="§12 the roles are instances, this many to a role (sizes count "
                             "instances: --sizes 3000 30000 --replicas 3 is 10,000 roles of 3)")
    args = parser.parse_args()
    seconds = {}
    for n in args.sizes:
        first, took, verbs = measure(n, args.runs, args.replicas)
        seconds[n] = took
        print(f"plan() of {n:>6} roles: {took * 1000:8.1f} ms = {took / n * 1e6:6.1f} µs per role"
              f"   (first pass, every launch worked out: {first / n * 1e6:.1f} µs per role)")
        if args.verbs:
            print("  " + ", ".join(f"{k} {v}" for k, v in sorted(verbs.items())))
    return 0 if verdict(seconds) else 1


def verdict(seconds: dict[int, float]) -> bool:
    """Print the growth from the smallest size to the largest and judge the goal
    (≤ 10 µs per role at the largest, growth ≤ 1.1× linear); True when met."""
    if len(seconds) < 2:
        return True
    small, big = min(seconds), max(seconds)
    growth = seconds[big] / seconds[small]
    per_role = seconds[big] / big * 1e6
    print(f"growth {small} → {big} roles ({big // small}× the roles): {growth:.1f}×")
    ok = per_role <= 10.0 and growth <= 1.1 * big / small
    print(f"goal ≤ 10 µs per role at {big} and growth ≤ {1.1 * big / small:.0f}×: "
          f"{'ok' if ok else 'MISSED'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
