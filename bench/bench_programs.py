"""Benchmark: a Program's check at start (BEHAVIOUR §14) against ``sha256sum``.

A llama.cpp-release-like tree: the testbed's compiled ``llama-server`` (copied,
never touched in place) and ``--libs`` shared libraries of ``--lib-mib`` MiB
beside it (random bytes), in a scratch directory (``/dev/shm`` when it has room).

1. **Nothing changed.** ``programstore.check`` against the real state store
   (SQLite, as a pass uses it) once the stamps are there: the median and the
   worst of ``--runs`` checks. Goal: ≤ 1 ms.
2. **Full rehash.** The same check with no stamps (every byte read and hashed)
   against ``sha256sum`` over the same files, alternately, the best of
   ``--runs`` each (page cache warm for both). Goal: ours ≥ 0.8× ``sha256sum``'s
   speed; the ratio printed is sha256sum's time over ours.

The load average is printed with the figures.

Run: ``.venv/bin/python bench/bench_programs.py [--libs 4] [--lib-mib 64] [--runs 50]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.core.desired import ModelFile, ProgramSpec, Runtime  # noqa: E402
from reconciler.models import programstore  # noqa: E402
from reconciler.models.modelstore import MemoryStampStore  # noqa: E402
from reconciler.state.store import Store  # noqa: E402

TESTBED = "/opt/reconciler-testbed/bin/llama-server"


def scratch() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and shutil.disk_usage(shm).free > 2 << 30:
        return tempfile.mkdtemp(prefix="bench-programs-", dir=shm)
    return tempfile.mkdtemp(prefix="bench-programs-")


def release(root: Path, libs: int, lib_mib: int) -> ProgramSpec:
    root.mkdir()
    if os.path.exists(TESTBED):
        shutil.copy(TESTBED, root / "llama-server")
    else:
        (root / "llama-server").write_bytes(os.urandom(15 << 20))
    for i in range(libs):
        (root / f"libggml-{i}.so").write_bytes(os.urandom(lib_mib << 20))
    files = []
    for path in sorted(p.name for p in root.iterdir()):
        data = (root / path).read_bytes()
        files.append(ModelFile(path=path, sha256=hashlib.sha256(data).hexdigest(),
                               size=len(data)))
    return ProgramSpec(name="bench", runtime=Runtime.LLAMACPP, version="b11434",
                       entrypoint="llama-server", root=str(root), files=tuple(files))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libs", type=int, default=4)
    parser.add_argument("--lib-mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    where = Path(scratch())
    try:
        program = release(where / "llama", args.libs, args.lib_mib)
        total = sum(f.size or 0 for f in program.files)
        with Store(where / "state") as store:
            assert programstore.check(program, store).ok
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                got = programstore.check(program, store)
                times.append(time.perf_counter() - t0)
                assert got.ok and got.hashed == 0
        med, worst = statistics.median(times) * 1e3, max(times) * 1e3
        ours, theirs = [], []
        paths = [os.path.join(program.root or "", f.path) for f in program.files]
        for _ in range(max(3, args.runs // 10)):
            t0 = time.perf_counter()
            got = programstore.check(program, MemoryStampStore())
            ours.append(time.perf_counter() - t0)
            assert got.ok and got.hashed == total
            t0 = time.perf_counter()
            subprocess.run(["sha256sum", *paths], check=True, stdout=subprocess.DEVNULL)
            theirs.append(time.perf_counter() - t0)
        ratio = min(theirs) / min(ours)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"program: {len(program.files)} files, {total / 2**20:.1f} MiB "
              f"(llama-server + {args.libs} × {args.lib_mib} MiB)")
        print(f"check at start, nothing changed (SQLite stamps): median {med:.3f} ms, "
              f"worst {worst:.3f} ms over {args.runs} (goal ≤ 1 ms)")
        print(f"full rehash: ours {min(ours) * 1e3:.0f} ms "
              f"({total / 2**20 / min(ours):.0f} MiB/s), sha256sum {min(theirs) * 1e3:.0f} ms "
              f"({total / 2**20 / min(theirs):.0f} MiB/s): ratio {ratio:.2f} (goal ≥ 0.8)")
        print(f"load average: {load}")
        return 0 if med <= 1.0 and ratio >= 0.8 else 1
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
