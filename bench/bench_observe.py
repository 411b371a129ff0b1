"""Benchmark: observe() over 200 loopback servers that each answer after 50 ms.

Run: ``.venv/bin/python bench/bench_observe.py [--servers 200] [--delay 0.05]``

Two fleets, each timed as one observe() of a single role against one of all N
roles (the ratio; probes run concurrently, so the goal is at most 2.5x, and
2.0x for servers of our own, issue 27):

* **adopted** — foreign servers, asked in full every pass: mlx-lm
  ``GET /health``; llama.cpp ``/health``, then ``/v1/models`` + ``/props``.
  What this measures is the client's work per request.
* **managed** — N servers of our own in steady state: each port is held by its
  own process carrying our ``RECONCILER_INSTANCE`` marker, recorded with pid and
  create time, healthy since it was created. The observer reads the process
  table (ownership, listeners) for all of them, and a settled llama.cpp server
  of ours is asked ``/health`` only: its identity is its launch.

In both, one child process answers every port, so the servers cost the same
and the ratios compare the observer's work. Figures are printed with the load
average: other work on the machine (the servers share its cores) moves them.
Run the same script against an older tree to compare (``--tree DIR`` imports
``reconciler`` from there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]
if "--tree" in sys.argv:
    TREE = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
sys.path.insert(0, str(TREE))

import psutil  # noqa: E402

from reconciler.core.desired import Desired, Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.ownership import MARKER_ENV
from reconciler.world.observe import observe
from reconciler.core.observed import Remembered, RoleRecord
from reconciler.core.observed import flat_record

#: The goal per fleet: at most this many times one role's observation.
GOALS = {"adopted": 2.5, "managed": 2.0}
MODEL = "/models/bench.gguf"


def answer(path: str, alias: str) -> bytes:
    known = {
        "/health": {"status": "ok"},
        "/v1/models": {"object": "list", "data": [{"id": alias}]},
        "/props": {"model_path": MODEL},
    }
    body = json.dumps(known.get(path, {"error": "not found"})).encode()
    status = b"200 OK" if path in known else b"404 Not Found"
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


def raise_fd_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# ---------------------------------------------------------------- the servers


def serve(listeners: list[socket.socket], delay: float, aliases: list[str], conn) -> None:  # type: ignore[no-untyped-def]
    """Child process: answer every request on each listening socket after ``delay``."""
    raise_fd_limit(len(listeners) * 4 + 256)

    def handler(alias: str):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                await asyncio.sleep(delay)
                writer.write(answer(path, alias))
                await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, IndexError):
                pass
            finally:
                writer.close()
        return handle

    async def main() -> None:
        for sock, alias in zip(listeners, aliases):
            await asyncio.start_server(handler(alias), sock=sock)
        conn.send("serving")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop

    asyncio.run(main())


class Fleet:
    """N listening sockets on loopback, answered by one child process (``serve``).

    ``marked``: each socket is also held by a process of "ours" — its own session,
    carrying our ``RECONCILER_INSTANCE`` marker — so the observer finds the port
    among the listeners of a process it owns, as for a server it started.
    """

    def __init__(self, count: int, delay: float, marked: bool) -> None:
        self.names = [f"r{i:03d}" for i in range(count)]
        self.listeners = []
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            self.listeners.append(sock)
        self.ports = [s.getsockname()[1] for s in self.listeners]
        self.markers: list[subprocess.Popen] = []
        for name, sock in zip(self.names, self.listeners) if marked else ():
            self.markers.append(subprocess.Popen(
                ["/bin/sleep", "3600"], env={MARKER_ENV: f"{name}-bench000"},
                pass_fds=(sock.fileno(),), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        self.created = [psutil.Process(m.pid).create_time() for m in self.markers]
        self.conn, theirs = multiprocessing.Pipe()
        self.child = multiprocessing.Process(
            target=serve, args=(self.listeners, delay, self.names, theirs))
        self.child.start()
        assert self.conn.recv() == "serving"
        for sock in self.listeners:
            sock.close()  # the child answers on them (and the markers hold them)

    def adopted(self, runtime: Runtime, n: int) -> tuple[Desired, Remembered]:
        return Desired(roles=tuple(
            RoleSpec(name=name, runtime=runtime, mode=Mode.ADOPTED, serve=ServeSpec(port=port))
            for name, port in zip(self.names[:n], self.ports))), Remembered()

    def managed(self, runtime: Runtime, n: int) -> tuple[Desired, Remembered]:
        """Our servers in steady state: recorded, owned, healthy since they were created."""
        roles, records = [], []
        for name, port, proc, created in zip(self.names[:n], self.ports, self.markers,
                                             self.created):
            roles.append(RoleSpec(name=name, runtime=runtime, mode=Mode.MANAGED, model=name,
                                  serve=ServeSpec(port=port)))
            argv = ("/opt/server", "--model", MODEL, "--host", "127.0.0.1", "--port", str(port),
                    "--alias", name)
            records.append(flat_record(
                name=name, instance_id=f"{name}-bench000", runtime=runtime, mode=Mode.MANAGED,
                port=port, pid=proc.pid, create_time=created, launch_argv=argv,
                started_at=created, healthy_since=created + 1))
        return Desired(roles=tuple(roles)), Remembered(roles=tuple(records))

    def close(self) -> None:
        self.conn.send("stop")
        self.child.join(timeout=10)
        if self.child.is_alive():
            self.child.terminate()
        for proc in self.markers:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- timing


def timed(desired: Desired, remembered: Remembered, runs: int) -> tuple[float, float, float]:
    """(best, median) wall seconds of ``runs`` observe() calls, and the median CPU
    seconds of this process per call; every role must read up."""
    samples, cpu = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        observed = observe(desired, remembered, probe_timeout=5.0)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        bad = [r.name for r in observed.roles if r.probe is None or r.probe.health != "up"]
        assert not bad, f"not up: {bad[:5]}"
    return min(samples), statistics.median(samples), statistics.median(cpu)


SCENARIOS = {
    "adopted": ("foreign servers, asked in full every pass",
                ("GET /health", "/health, then /v1/models + /props")),
    "managed": ("servers of ours (marked processes) in steady state",
                ("ours, answering", "ours, healthy since created")),
}


def scenario(kind: str, count: int, delay: float, runs: int) -> list[float]:
    title, whats = SCENARIOS[kind]
    fleet = Fleet(count, delay, marked=kind == "managed")
    build = getattr(fleet, kind)
    try:
        print(f"{kind}: {count} {title}", flush=True)
        ratios = []
        for runtime, what in zip((Runtime.MLX_LM, Runtime.LLAMACPP), whats):
            timed(*build(runtime, 1), 1)  # warm up imports and caches
            one = timed(*build(runtime, 1), runs)
            all_ = timed(*build(runtime, count), runs)
            ratio = all_[0] / one[0]
            ratios.append(ratio)
            print(f"  {runtime:9} ({what}): one role {one[0] * 1000:.1f} ({one[1] * 1000:.1f}) ms, "
                  f"{count} roles {all_[0] * 1000:.1f} ({all_[1] * 1000:.1f}) ms, "
                  f"ratio {ratio:.2f}x ({all_[1] / one[1]:.2f}x); "
                  f"observer CPU {all_[2] * 1000:.0f} ms a pass of {count}", flush=True)
        return ratios
    finally:
        fleet.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tree", help="import reconciler from this checkout (default: this one)")
    parser.add_argument("--only", choices=tuple(SCENARIOS))
    args = parser.parse_args()
    raise_fd_limit(args.servers * 4 + 256)
    print(f"{args.servers} loopback servers, each answering after {args.delay * 1000:.0f} ms; "
          f"best (median) of {args.runs} runs; reconciler from {TREE}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    over = []
    for kind in SCENARIOS:
        if args.only in (None, kind):
            worst, goal = max(scenario(kind, args.servers, args.delay, args.runs)), GOALS[kind]
            verdict = "ok" if worst <= goal else f"OVER the {goal}x goal"
            print(f"{kind}: worst ratio {worst:.2f}x (goal <= {goal}x): {verdict}", flush=True)
            over += [kind] if worst > goal else []
    print(f"{'over the goal: ' + ', '.join(over) if over else 'every goal met'}; "
          f"load average now {os.getloadavg()[0]:.2f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
