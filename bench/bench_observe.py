"""Benchmark: observe() over 200 loopback servers that each answer after 50 ms.

Run: ``.venv/bin/python bench/bench_observe.py [--servers 200] [--delay 0.05]``

The servers live in a child process (an asyncio server on N ports, each
answer delayed by ``--delay``), so their work does not share the observer's
GIL. Reported: the time of one observe() of a single role, of all N roles,
and the ratio. Probes run concurrently, so the goal is a ratio of at most 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.desired import Desired, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.observed import Remembered
from reconciler.observe import observe  # noqa: E402

BODIES = {
    "/health": {"status": "ok"},
    "/v1/models": {"object": "list", "data": [{"id": "bench"}]},
    "/props": {"model_path": "/models/bench.gguf"},
}


def raise_fd_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def serve(count: int, delay: float, conn) -> None:  # type: ignore[no-untyped-def]
    """Child process: listen on ``count`` ports, answer every request after ``delay``."""
    raise_fd_limit(count * 4 + 256)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            await asyncio.sleep(delay)
            body = json.dumps(BODIES.get(path, {"error": "not found"})).encode()
            status = b"200 OK" if path in BODIES else b"404 Not Found"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(handle, "127.0.0.1", 0, backlog=64)
                   for _ in range(count)]
        conn.send([s.sockets[0].getsockname()[1] for s in servers])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop

    asyncio.run(main())


def desired_for(ports: list[int], runtime: Runtime) -> Desired:
    roles = tuple(
        RoleSpec(name=f"r{i:03d}", runtime=runtime, mode=Mode.ADOPTED,
                 serve=ServeSpec(port=port))
        for i, port in enumerate(ports)
    )
    return Desired(roles=roles)


def timed(desired: Desired, runs: int) -> tuple[float, float, float]:
    """(best, median) wall seconds of ``runs`` observe() calls, and the median
    CPU seconds of this process per call (less sensitive to other load);
    every role must read up."""
    samples, cpu = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        observed = observe(desired, Remembered(), probe_timeout=5.0)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        bad = [r.name for r in observed.roles if r.probe is None or r.probe.health != "up"]
        assert not bad, f"not up: {bad[:5]}"
    return min(samples), statistics.median(samples), statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    raise_fd_limit(args.servers * 4 + 256)

    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.Process(target=serve, args=(args.servers, args.delay, theirs))
    child.start()
    try:
        ports = ours.recv()
        print(f"{args.servers} loopback servers, each answering after {args.delay * 1000:.0f} ms; "
              f"best (median) of {args.runs} runs; load average {os.getloadavg()[0]:.2f}")
        worst = 0.0
        for runtime, what in ((Runtime.MLX_LM, "GET /health"),
                              (Runtime.LLAMACPP, "/health, then /v1/models + /props")):
            timed(desired_for(ports[:1], runtime), 1)  # warm up imports and caches
            one, one_med, _ = timed(desired_for(ports[:1], runtime), args.runs)
            all_, all_med, all_cpu = timed(desired_for(ports, runtime), args.runs)
            ratio = all_ / one
            worst = max(worst, ratio)
            print(f"  {runtime:9} ({what}): one role {one * 1000:.1f} ({one_med * 1000:.1f}) ms, "
                  f"{args.servers} roles {all_ * 1000:.1f} ({all_med * 1000:.1f}) ms, "
                  f"ratio {ratio:.2f}x ({all_med / one_med:.2f}x); "
                  f"observer CPU {all_cpu * 1000:.0f} ms a pass of {args.servers}")
        verdict = "ok" if worst <= 3.0 else "OVER the 3x goal"
        print(f"worst ratio {worst:.2f}x (goal <= 3x): {verdict}")
        return 0 if worst <= 3.0 else 1
    finally:
        ours.send("stop")
        child.join(timeout=10)
        if child.is_alive():
            child.terminate()


if __name__ == "__main__":
    sys.exit(main())
