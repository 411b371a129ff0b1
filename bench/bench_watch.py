"""Benchmark: ``reconcile watch`` against supervisord, side by side in one run.

Run: ``.venv/bin/python bench/bench_watch.py [--programs 20] [--kills 20] [--edits 10] [--idle 60]``

Both supervisors run at the same time, each over ``--programs`` copies of
the same cheap server (a stdlib ``http.server`` on a loopback port that
answers llama-server's ``/health``, ``/v1/models`` and ``/props``, started as
``/usr/bin/python3 <script> --model … --host 127.0.0.1 --port P --alias …``),
so that 2 cores can afford 40 servers. supervisord (``.venv/bin/supervisord``)
has ``autorestart=true`` and ``startsecs=0``; the reconciler has backoff base
0 (and ``max_restarts`` high enough for every kill).

Measured:

1. **Kill → replacement spawned**: SIGKILL one server, then the time from
   the kill to the *start time* of its replacement (``/proc/<pid>/stat``
   starttime, on the same CLOCK_BOOTTIME as the kill's timestamp, 10 ms
   ticks), so the polling that finds the new process adds nothing. Kills
   alternate between the two sides after a random settle, so neither side's
   timers phase-lock with the kills. Goal: ratio of medians ≤ 1.0.
2. **Manifest edit → restart begun** (reconciler only): rewrite a role's
   manifest (its ``--threads`` value), time to the replacement's start.
   Goal: median ≤ 0.5 s.
3. **Idle**: with every server up, CPU time of each supervisor process
   (children excluded) over ``--idle`` seconds, as % of one core (goal
   ≤ 1 %), and RSS (goal: the reconciler ≤ 2× supervisord).

Everything lives in a fresh directory under /var/tmp (reachable by the
unprivileged uid the servers run as when this runs as root) and is removed,
with every process, at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
NOBODY = 65534
CLK_TCK = os.sysconf("SC_CLK_TCK")

SERVER = '''\
#!/usr/bin/python3
"""A cheap stand-in for llama-server: stdlib http.server answering its probes."""
import argparse, json, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--host"); p.add_argument("--port", type=int)
p.add_argument("--alias", default="bench")
args, _ = p.parse_known_args()
BODIES = {"/health": {"status": "ok"},
          "/v1/models": {"object": "list", "data": [{"id": args.alias}]},
          "/props": {"model_path": args.model}}

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(BODIES.get(self.path, {"error": "not found"})).encode()
        self.send_response(200 if self.path in BODIES else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
HTTPServer((args.host, args.port), H).serve_forever()
'''


# ---------------------------------------------------------------- helpers


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_at(pid: int) -> float | None:
    """A process's start on CLOCK_BOOTTIME (seconds), from /proc/<pid>/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19]) / CLK_TCK  # field 22 overall; 20 after "pid (comm)"


def free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(30000, 39999)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def healthy(port: int) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_for(predicate, timeout: float, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def child_pids(parent: int) -> set[int]:
    """Children of ``parent`` from /proc/<pid>/task/*/children (cheap: no process scan)."""
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{parent}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out.update(int(p) for p in Path(f"/proc/{parent}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return out


def child_on_port(parent: int, port: int, not_pid: int | None) -> int | None:
    """The pid of ``parent``'s live child serving ``port`` (by its argv), other than ``not_pid``."""
    needle = ["--port", str(port)]
    for pid in child_pids(parent):
        if pid == not_pid:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if any(argv[i:i + 2] == needle for i in range(len(argv) - 1)):
            return pid
    return None


# ---------------------------------------------------------------- the two sides


class Side:
    name = ""
    proc: subprocess.Popen

    def __init__(self, root: Path, server: Path, model: Path, ports: list[int]) -> None:
        self.root, self.server, self.model, self.ports = root, server, model, ports

    @property
    def ps(self) -> psutil.Process:
        return psutil.Process(self.proc.pid)

    def pid_on(self, port: int, not_pid: int | None = None) -> int | None:
        return child_on_port(self.proc.pid, port, not_pid)

    def all_up(self) -> bool:
        return all(self.pid_on(p) and healthy(p) for p in self.ports)


class Reconciler(Side):
    name = "reconcile watch"

    def start(self) -> None:
        self.manifests = self.root / "manifests"
        self.manifests.mkdir()
        digest = hashlib.sha256(self.model.read_bytes()).hexdigest()
        run_as = f"  run_as: {{uid: {NOBODY}, gid: {NOBODY}}}\n" if os.geteuid() == 0 else ""
        (self.manifests / "node.yaml").write_text(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: NodeConfig
            metadata: {{name: bench}}
            spec:
              allowed_ports: {{from: 30000, to: 39999}}
              serve_programs: {{llamacpp: {self.server}}}
              stop_grace: 2s
              probe_timeout: 2s
              restart: {{max_restarts: 1000, base: 0s, cap: 0s, stable_after: 1h}}
            """) + run_as)
        (self.manifests / "model.yaml").write_text(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Model
            metadata: {{name: bench}}
            spec:
              format: gguf
              root: {self.model.parent}
              shards:
                - {{path: {self.model.name}, size: {self.model.stat().st_size}, sha256: {digest}}}
            """))
        for i, port in enumerate(self.ports):
            self.write_role(i, port, threads=1)
        self.log = open(self.root / "watch.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(self.manifests),
             "--state-dir", str(self.root / "state"), "--log-format", "json",
             "watch", "--stop-on-exit"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.log,
        )

    def write_role(self, i: int, port: int, threads: int) -> None:
        path = self.manifests / f"role-r{i:02d}.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: r{i:02d}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: bench
              serve: {{port: {port}, extra_args: ["--threads", "{threads}"]}}
            """))
        os.replace(tmp, path)  # what a careful editor or `git checkout` does

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Supervisord(Side):
    name = "supervisord"

    def start(self) -> None:
        folder = self.root / "supervisord"
        folder.mkdir()
        user = "user=nobody\n" if os.geteuid() == 0 else ""
        programs = "".join(textwrap.dedent(f"""
            [program:s{i:02d}]
            command={self.server} --model {self.model} --host 127.0.0.1 --port {port} --alias bench
            autorestart=true
            startsecs=0
            stopasgroup=true
            killasgroup=true
            stdout_logfile={folder}/s{i:02d}.log
            redirect_stderr=true
            """) + user for i, port in enumerate(self.ports))
        conf = folder / "supervisord.conf"
        conf.write_text(textwrap.dedent(f"""\
            [supervisord]
            nodaemon=true
            logfile={folder}/supervisord.log
            pidfile={folder}/supervisord.pid
            childlogdir={folder}
            [unix_http_server]
            file={folder}/supervisor.sock
            [rpcinterface:supervisor]
            supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
            [supervisorctl]
            serverurl=unix://{folder}/supervisor.sock
            """) + programs)
        self.proc = subprocess.Popen([str(VENV_BIN / "supervisord"), "-n", "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- measurements


def kill_and_time(side: Side, port: int) -> float:
    """SIGKILL the server on ``port``; seconds until its replacement started."""
    old = wait_for(lambda: side.pid_on(port), 10)
    if not old:
        raise RuntimeError(f"{side.name}: no server on port {port}")
    killed = boottime()
    os.kill(old, signal.SIGKILL)
    # The start time comes from /proc, so a slow poll costs no precision (and
    # leaves the two cores to the supervisors).
    new = wait_for(lambda: side.pid_on(port, not_pid=old), 15, 0.05)
    if not new:
        raise RuntimeError(f"{side.name}: no replacement on port {port} after 15 s")
    begun = started_at(new)
    wait_for(lambda: healthy(port), 15, 0.05)
    return max(0.0, (begun or boottime()) - killed)


def idle_usage(sides: list[Side], seconds: float) -> dict[str, tuple[float, float]]:
    """CPU % of one core (the supervisor process only) and RSS MiB over ``seconds``."""
    before = {s.name: s.ps.cpu_times() for s in sides}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    out = {}
    for s in sides:
        after = s.ps.cpu_times()
        a, b = before[s.name], after
        used = (b.user - a.user) + (b.system - a.system)
        out[s.name] = (100.0 * used / wall, s.ps.memory_info().rss / 2**20)
    return out


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--edits", type=int, default=10)
    parser.add_argument("--idle", type=float, default=60.0, help="idle window, seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-log", metavar="PATH",
                        help="copy the reconciler's (JSON) log here for a post-mortem")
    args = parser.parse_args()
    random.seed(args.seed)

    root = Path(tempfile.mkdtemp(prefix="reconciler-bench-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    (root / "bin").mkdir(mode=0o755)
    server = root / "bin" / "cheap-llama-server"
    server.write_text(SERVER)
    os.chmod(server, 0o755)
    (root / "models").mkdir(mode=0o755)
    model = root / "models" / "bench.gguf"
    model.write_bytes(b"GGUF" + os.urandom(4092))
    os.chmod(model, 0o644)

    ports = free_ports(2 * args.programs)
    ours = Reconciler(root, server, model, ports[: args.programs])
    theirs = Supervisord(root, server, model, ports[args.programs:])
    sides: list[Side] = [ours, theirs]
    print(f"{args.programs} programs per side, each `/usr/bin/python3 {server.name}` "
          "(a stdlib http.server answering llama-server's probes), loopback ports; "
          f"{os.cpu_count()} cores")
    try:
        for side in sides:
            side.start()
        for side in sides:
            if not wait_for(side.all_up, 60, 0.2):
                log = (root / "watch.log").read_text() if side is ours else ""
                raise RuntimeError(f"{side.name}: not every program came up\n{log[-3000:]}")
        time.sleep(2.0)  # let the reconciler's post-start polls finish

        usage = idle_usage(sides, args.idle)
        kills: dict[str, list[float]] = {s.name: [] for s in sides}
        for _ in range(args.kills):
            for side in sides:
                time.sleep(random.uniform(0.3, 1.3))
                kills[side.name].append(kill_and_time(side, side.ports[0]))

        edits: list[float] = []
        port = ours.ports[1]
        for n in range(args.edits):
            old = wait_for(lambda: ours.pid_on(port), 10)
            time.sleep(random.uniform(0.3, 0.8))
            edited = boottime()
            ours.write_role(1, port, threads=2 + n)
            new = wait_for(lambda: ours.pid_on(port, not_pid=old), 15, 0.05)
            if not new:
                raise RuntimeError("no restart after a manifest edit")
            edits.append(max(0.0, (started_at(new) or boottime()) - edited))
            wait_for(lambda: healthy(port), 15)
    finally:
        for side in sides:
            side.stop()
        for proc in psutil.process_iter():
            try:
                if str(server) in " ".join(proc.cmdline()):
                    proc.kill()
            except psutil.Error:
                pass
        keep_log = (root / "watch.log").read_text() if (root / "watch.log").exists() else ""
        if args.keep_log:
            Path(args.keep_log).write_text(keep_log)
        shutil.rmtree(root, ignore_errors=True)

    ok = True
    print("\nKill -9 -> replacement spawned (median over "
          f"{args.kills} kills, process start time, 10 ms ticks):")
    med = {name: statistics.median(v) for name, v in kills.items()}
    for name, values in kills.items():
        print(f"  {name:16} median {median_ms(values)}   "
              f"min {min(values) * 1000:6.1f}  max {max(values) * 1000:6.1f} ms")
    ratio = med[ours.name] / med[theirs.name] if med[theirs.name] else float("inf")
    verdict = ratio <= 1.0
    ok &= verdict
    print(f"  ratio reconcile/supervisord {ratio:.2f} (goal <= 1.0): {'PASS' if verdict else 'FAIL'}")

    if edits:
        verdict = statistics.median(edits) <= 0.5
        ok &= verdict
        print(f"\nManifest edit -> restart begun (median over {args.edits} edits): "
              f"{median_ms(edits)} (goal <= 500 ms): {'PASS' if verdict else 'FAIL'}")

    print(f"\nIdle {args.idle:g} s with {args.programs} servers each (supervisor process only):")
    for name, (cpu, rss) in usage.items():
        print(f"  {name:16} CPU {cpu:5.2f} % of a core   RSS {rss:6.1f} MiB")
    cpu_ok = usage[ours.name][0] <= 1.0
    rss_ratio = usage[ours.name][1] / usage[theirs.name][1]
    rss_ok = rss_ratio <= 2.0
    ok &= cpu_ok and rss_ok
    print(f"  reconcile CPU {usage[ours.name][0]:.2f} % (goal <= 1 %): {'PASS' if cpu_ok else 'FAIL'}")
    print(f"  RSS ratio reconcile/supervisord {rss_ratio:.2f} (goal <= 2.0): "
          f"{'PASS' if rss_ok else 'FAIL'}")
    if not ok and keep_log:
        print("\n(last lines of the reconciler's log)\n" + "\n".join(keep_log.splitlines()[-15:]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
