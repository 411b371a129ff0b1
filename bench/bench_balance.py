"""Benchmark: a group of instances behind one name (BEHAVIOUR §9.1): balancing, overhead, failover.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_balance.py [--rounds 3] [--quick]``

The instances are ``tests/support/slotserver.py`` servers, one process each: they behave,
for the router, as llama-server's slots do (``--parallel 2``: two requests served at once,
the rest queued inside the server in arrival order; ``/props`` ``total_slots``; a request
takes ``per_token`` × ``max_tokens``), and nothing else — so lengths are exact and the
figures measure the router, not the 2 shared cores a real llama-server needs for its decode
thread (three of them and 24 clients on 2 cores measure the CPU scheduler). The routers are
the real ``Proxy`` and ``Book``, each in a process of its own, with a table of the group set
as a pass would.

1. **Quality**: 3 instances of 2 slots; 24 concurrent clients, 8 requests each, 1 in 8
   long (250 tokens, 1 s) among short ones (12 tokens, 48 ms), the same seeded sequence
   for both; our policy against plain round-robin (another router process whose
   ``balancing.choose`` goes round the ready instances whatever their load, so the servers
   queue), rounds alternated. p50/p99 latency per policy; each server's requests inside
   (served + queued) sampled every 20 ms: the mean spread (max − min across servers) and
   the samples in which one server held more than its slots while another had a free slot.
   Goal: p99 ≤ 0.8× round-robin's; ours never over slots while another has room.
2. **Overhead**, 8 instances behind one name (0-token answers): 1,000 sequential requests
   through the router and direct (going round the 8 servers, as the router does: each
   server process woken as often on both sides), interleaved, one keep-alive connection
   per server: added p50,
   p99 (goal p50 ≤ 1 ms); a 220 KB prompt body, 200 each: added p50 (goal ≤ 2 ms); the
   choice itself (members, instances, ``choose``) in this process, CPU per choice (goal
   ≤ 50 µs).
3. **Failover**: 3 instances of 2 slots, 24 clients (short and long as in 1) for 4 s; at 2 s
   one instance's process gets ``kill -9``. Failed requests against those in flight on it
   (goal: failed ≤ in flight on it): the router's own count when it takes the instance
   out, and the server's count read just before the kill (a request may start between
   that read and the kill); time from the kill to the router's removal of it from rotation
   (goal ≤ 50 ms), as the router process prints it.

The load average is printed before and after: compare figures under similar loads only.

Measured (2026-12-02, 2 cores shared with other sessions' test and mutant runs):

* quality, 192 requests per policy per round, 4 runs (load 6.7, 6.2, 3.4, 4.3; 1, 4, 4
  and 8 rounds): p99 ours / round-robin 0.70, 0.76, 0.87, 0.81 (the goal ≤ 0.8 met in 2
  of 4; the 8-round run, 1,536 requests each, 0.81) — ours 1.95–2.13 s, round-robin
  2.24–3.05 s; max 2.1–2.3 s against 2.99–3.55 s. p50 is higher with ours (0.47–0.56 s
  against 0.23–0.39 s):
  24 closed-loop clients over 6 slots keep ~18 requests waiting, and a queue in the router
  spreads that wait over every request in arrival order, where round-robin lets a short
  request behind no long one through at once and leaves one behind a long one for a
  second. Requests inside a server, spread across the three: 0.27–0.34 ours, 9.1–11.4
  round-robin; samples with a server over its slots while another had a free one: none
  of ours (0 of 164, 815, 885, 1,930), 48–74 % of round-robin's;
* overhead, 8 instances, 3 runs (load 5.2, 4.7, 2.7): added p50 0.75, 0.91, 0.69 ms (goal
  ≤ 1 ms), p99 0.2–1.8 ms; a 220 KB body: added p50 3.2, 3.4, 2.1 ms (goal ≤ 2 ms: missed
  by a little; a role of one instance, the path as it was before groups, added 2.6 and
  3.5 ms in the same conditions: the cost is the body's parse and re-encoding,
  ``json.loads`` 0.35 ms and ``json.dumps`` 1.05–1.4 ms of CPU for 220 KB. Splicing the
  served name into the raw bytes, the model's span found by the C scanner, was tried:
  0.59 ms of CPU instead of 1.05, not kept — a second reading of every body the router
  forwards, for 0.5 ms); the choice 18–28 µs of CPU (goal ≤ 50 µs; 35 µs before
  ``Instance`` was a tuple);
* failover, 8 runs (load 3.6–6.9): out of rotation 3.1–24.7 ms after the kill (goal ≤ 50
  ms; 3.1–15.2 ms at load ≤ 5.7), by the reset of a request in flight on it; 2 failed in
  each run, and in the 3 runs that print the router's count, 2 were in flight on it at
  its removal (goal: failed ≤ in flight); 139–175 answered.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def free_ports(count: int) -> list[int]:
    """Ports free now, with port + 1000 free too (the slot servers' stats door)."""
    out: list[int] = []
    while len(out) < count:
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port + 1000 > 65535:
                continue
            try:
                b.bind(("127.0.0.1", port + 1000))
            except OSError:
                continue
            if port not in out:
                out.append(port)
    return out


def spawn(args: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    line = proc.stdout.readline()
    assert line.startswith("ready"), line
    return proc


def servers(count: int, slots: int, per_token: float) -> tuple[list[int], list[subprocess.Popen]]:
    ports = free_ports(count)
    return ports, [spawn(["-m", "tests.support.slotserver", str(p), str(slots), str(per_token)])
                   for p in ports]


def router(policy: str, ports: list[int]) -> tuple[int, subprocess.Popen]:
    port = free_ports(1)[0]
    proc = spawn([__file__, "--serve-router", str(port), policy, ",".join(map(str, ports))])
    return port, proc


# ---------------------------------------------------------------- the router process

async def _serve_router(port: int, policy: str, ports: list[int]) -> None:
    from reconciler.core.desired import RouterConfig
    from reconciler.router import balancing
    from reconciler.router.proxy import Proxy
    from reconciler.router.queues import Book
    from reconciler.router.rules import Route, RouteState, Table

    if policy == "rr":
        counter = itertools.count()

        def round_robin(instances, turn=0):
            ready = [i for i in instances if i.ready]
            return ready[next(counter) % len(ready)] if ready else None
        balancing.choose = round_robin
        balancing.full = lambda instances: False
    book = Book(lambda: None)
    proxy = Proxy(RouterConfig(host="127.0.0.1", port=port, max_queue=100000,
                               queue_timeout=600.0), book)
    take_out = proxy._take_out  # noqa: SLF001

    def said(route, why):
        if route.role not in proxy._out:  # noqa: SLF001
            print(f"out {route.role} {time.time():.6f} {book.in_flight(route.role)} {why}",
                  flush=True)
        take_out(route, why)
    proxy._take_out = said  # noqa: SLF001
    await proxy.start()
    routes = tuple(Route(role="chat" if i == 0 else f"chat/{i}",
                         names=("chat" if i == 0 else f"chat/{i}", "chat"), host="127.0.0.1",
                         port=p, state=RouteState.READY, status="running", group="chat",
                         replica=i, upstream_model="m") for i, p in enumerate(ports))
    proxy.table = proxy.known_ready(Table(routes=routes))
    book.publish(proxy.table, 0)
    while len(routes) > 1 and not all(proxy._slots.get(r.role) for r in routes):  # noqa: SLF001
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------- clients

def plan_lengths(seed: int, clients: int, each: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[250 if rng.random() < 1 / 8 else 12 for _ in range(each)] for _ in range(clients)]


async def load(url: str, lengths: list[list[int]], until: float | None = None):
    """Each client's requests in turn; (latencies, failures)."""
    import aiohttp

    latencies: list[float] = []
    failed = 0

    async def client(session, mine):
        nonlocal failed
        for tokens in itertools.cycle(mine) if until else mine:
            if until and time.monotonic() > until:
                return
            body = {"model": "chat", "max_tokens": tokens,
                    "messages": [{"role": "user", "content": "hi"}]}
            t = time.monotonic()
            try:
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    ok = r.status == 200
            except aiohttp.ClientError:
                ok = False
            if ok:
                latencies.append(time.monotonic() - t)
            else:
                failed += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(client(session, m) for m in lengths))
    return latencies, failed


async def sample(ports: list[int], slots: int, stop: asyncio.Event, out: list):
    import aiohttp

    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            row = []
            for p in ports:
                try:
                    async with session.get(f"http://127.0.0.1:{p + 1000}/stats") as r:
                        row.append(await r.json())
                except aiohttp.ClientError:
                    row.append(None)
            out.append(row)
            await asyncio.sleep(0.02)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


async def quality(rounds: int, clients: int, each: int) -> None:
    slots, per_token = 2, 0.004
    ports, procs = servers(3, slots, per_token)
    ours_port, ours = router("ours", ports)
    rr_port, rr = router("rr", ports)
    try:
        got = {"ours": ([], []), "rr": ([], [])}
        for r in range(rounds):
            lengths = plan_lengths(r, clients, each)
            for name, port in (("ours", ours_port), ("rr", rr_port)) if r % 2 == 0 else (
                    ("rr", rr_port), ("ours", ours_port)):
                stop, samples = asyncio.Event(), []
                sampler = asyncio.create_task(sample(ports, slots, stop, samples))
                lat, failed = await load(f"http://127.0.0.1:{port}", lengths)
                stop.set()
                await sampler
                assert failed == 0, (name, failed)
                got[name][0].extend(lat)
                got[name][1].extend(s for s in samples if None not in s)
        for name, (lat, samples) in got.items():
            spread = statistics.mean(max(x["inside"] for x in s) - min(x["inside"] for x in s)
                                     for s in samples)
            over = sum(1 for s in samples if any(x["inside"] > slots for x in s)
                       and any(x["serving"] < slots for x in s))
            print(f"  {name:4}: {len(lat)} requests, p50 {pct(lat, .5) * 1e3:7.1f} ms, "
                  f"p99 {pct(lat, .99) * 1e3:7.1f} ms, max {max(lat) * 1e3:7.1f} ms; "
                  f"inside spread {spread:.2f}; over slots while another had room: "
                  f"{over} of {len(samples)} samples")
        print(f"  p99 ours/round-robin: {pct(got['ours'][0], .99) / pct(got['rr'][0], .99):.2f}"
              " (goal ≤ 0.8)")
    finally:
        for p in (*procs, ours, rr):
            p.kill()


def sequential(ports: list[int], body: bytes, count: int) -> list[float]:
    """``count`` requests in turn, going round ``ports`` (one keep-alive connection each)."""
    conns = [http.client.HTTPConnection("127.0.0.1", p) for p in ports]
    out = []
    for i in range(count):
        conn = conns[i % len(conns)]
        t = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body,
                     {"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
        out.append(time.perf_counter() - t)
    for conn in conns:
        conn.close()
    return out


def overhead(requests: int, instances: int = 8) -> None:
    ports, procs = servers(instances, 2, 0.0)
    rport, rproc = router("ours", ports)
    try:
        small = json.dumps({"model": "chat", "max_tokens": 0,
                            "messages": [{"role": "user", "content": "hi"}]}).encode()
        big = json.dumps({"model": "chat", "max_tokens": 0, "messages": [
            {"role": "user", "content": "word " * (220 * 1024 // 5)}]}).encode()
        for label, body, count in (("1-token", small, requests),
                                   (f"{len(big) // 1024} KB body", big, requests // 5)):
            routed, direct = [], []
            for _ in range(10):
                routed += sequential([rport], body, count // 10)
                direct += sequential(ports, body, count // 10)  # round the same servers
            print(f"  {label}: added p50 {(pct(routed, .5) - pct(direct, .5)) * 1e3:.2f} ms, "
                  f"p99 {(pct(routed, .99) - pct(direct, .99)) * 1e3:.2f} ms "
                  f"(direct p50 {pct(direct, .5) * 1e3:.2f} ms)")
    finally:
        for p in (*procs, rproc):
            p.kill()
    choice_cpu()


def choice_cpu() -> None:
    from reconciler.core.desired import RouterConfig
    from reconciler.router import balancing
    from reconciler.router.proxy import Proxy
    from reconciler.router.queues import Book
    from reconciler.router.rules import Route, RouteState, Table

    proxy = Proxy(RouterConfig(), Book(lambda: None))
    others = tuple(Route(role=f"r{i}", names=(f"r{i}",), host="127.0.0.1", port=9000 + i,
                         state=RouteState.READY) for i in range(20))
    group = tuple(Route(role="chat" if i == 0 else f"chat/{i}", names=("chat",),
                        host="127.0.0.1", port=8000 + i, state=RouteState.READY,
                        group="chat", replica=i) for i in range(8))
    proxy.table = Table(routes=others + group)
    n = 20000
    t = time.thread_time()
    for i in range(n):
        members = proxy.table.target("chat")
        balancing.choose(proxy._instances(members), i)  # noqa: SLF001
    per = (time.thread_time() - t) / n
    print(f"  choice of 1 of 8 instances (in a table of 28 routes): {per * 1e6:.1f} µs CPU "
          "(goal ≤ 50 µs)")


async def failover(clients: int) -> None:
    ports, procs = servers(3, 2, 0.004)
    rport, rproc = router("ours", ports)
    try:
        lengths = plan_lengths(99, clients, 8)
        until = time.monotonic() + 4.0
        task = asyncio.create_task(load(f"http://127.0.0.1:{rport}", lengths, until))
        await asyncio.sleep(2.0)
        conn = http.client.HTTPConnection("127.0.0.1", ports[1] + 1000)
        conn.request("GET", "/stats")
        inside = json.loads(conn.getresponse().read())["inside"]
        killed = time.time()
        os.kill(procs[1].pid, signal.SIGKILL)
        latencies, failed = await task
        line = await asyncio.get_running_loop().run_in_executor(None, rproc.stdout.readline)
        removed, flying = float(line.split()[2]), int(line.split()[3])
        print(f"  kill -9 of chat/1: {flying} request(s) in flight on it by the router's count "
              f"at its removal ({inside} inside it by its own count just before the kill); "
              f"{failed} failed, {len(latencies)} answered; out of rotation "
              f"{(removed - killed) * 1e3:.2f} ms after the kill ({' '.join(line.split()[4:])})")
    finally:
        for p in (*procs, rproc):
            p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--only", choices=("quality", "overhead", "failover"))
    parser.add_argument("--instances", type=int, default=8, help="for the overhead")
    parser.add_argument("--serve-router", nargs=3, metavar=("PORT", "POLICY", "PORTS"))
    args = parser.parse_args()
    if args.serve_router:
        port, policy, ports = args.serve_router
        asyncio.run(_serve_router(int(port), policy, [int(p) for p in ports.split(",")]))
        return
    print(f"load average before: {os.getloadavg()}")
    if args.only in (None, "quality"):
        print("1. quality: 3 instances × 2 slots, 24 clients × 8 requests, 1 in 8 long")
        asyncio.run(quality(args.rounds, 24, 8))
    if args.only in (None, "overhead"):
        print(f"2. overhead: {args.instances} instance(s) behind one name")
        overhead(args.requests, args.instances)
    if args.only in (None, "failover"):
        print("3. failover: kill -9 of 1 of 3 instances under 24 clients")
        asyncio.run(failover(24))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
