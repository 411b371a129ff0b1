"""Soak: the router under swaps and kills (BEHAVIOUR §9), with figures; CI runs a short one.

Run: ``.venv/bin/python tools/soak_router.py [--seconds 120] [--workers 16] [--kill-every 20]
[--repo PATH] [--json]``

One ``reconcile watch`` with a router, a 1 GB budget, an always-on ``base``
(100 MB) and two on-demand roles ``od1``/``od2`` (600 MB each: only one fits
beside ``base``), the real ``llama-server`` with the testbed's tiny model.
``--workers`` threads of the official ``openai`` client ask a random role,
half of them streaming, ``max_tokens`` 8; every ``--kill-every`` seconds a
random running server gets kill -9. Then the load stops and the daemon's
descriptors are counted again after ``--settle`` seconds.

Every failed request is classed: **explained** when a kill of its role's
server fell inside it or at most ``--grace`` seconds before it ended (the
server it was sent to died); **ours** otherwise (a stop of ours cut it, a
503 while an evictable holder existed, a timeout in the queue …). The
figures: requests, failures by kind, ours, 503s, kills, cold starts and
evictions (swaps per minute), the daemon's descriptors before and after.
``tests/router/test_soak_e2e.py`` runs this for 35 s and asserts 0 ours,
0 503s and the descriptors back to their baseline. ``--repo`` runs another
checkout's daemon (the same figures for the code before a change).

``--replicas N`` (§12) soaks instances instead: one always-on role ``chat``
with ``replicas: N`` on consecutive ports, every request for ``chat`` (the
router balances), every ``--kill-every`` seconds kill -9 of a random
instance. A failure is explained only when a kill fell inside the request
(use ``--grace 0``: after the router learns of the exit, nothing more may
fail); ``by_instance_kills`` counts the kills. ``--restart-at S`` sets the
role's ``restarted_at`` S seconds in (a rolling update under load, §12):
``rollout_seconds`` is how long until every instance ran the new generation
and ``failed_in_rollout`` the failures that overlapped it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA_SERVER = TESTBED / "bin" / "llama-server"
MODEL = TESTBED / "models" / "tiny.gguf"
NOBODY = 65534
ROLES = ("base", "od1", "od2")


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if 20000 <= port <= 59999:
            return port


def manifests(root: Path, router: int, ports: dict[str, int], replicas: int = 0) -> Path:
    out = root / "manifests"
    out.mkdir(parents=True)
    digest = hashlib.sha256(MODEL.read_bytes()).hexdigest()
    run_as = f"\n  run_as: {{uid: {NOBODY}, gid: {NOBODY}}}" if os.geteuid() == 0 else ""
    docs = [textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: soak}}
        spec:
          allowed_ports: {{from: 20000, to: 59999}}
          serve_programs: {{llamacpp: {LLAMA_SERVER}}}
          memory_budget: 1GB
          stop_grace: 2s
          restart: {{max_restarts: 1000, base: 1s, cap: 2s, stable_after: 10s}}
          router: {{listen: "127.0.0.1:{router}", queue_timeout: 60s}}""") + run_as, f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          root: {MODEL.parent}
          shards:
            - {{path: {MODEL.name}, size: {MODEL.stat().st_size}, sha256: {digest}}}"""]
    for name, port in ports.items():
        state, size = ("running", "100MB") if name == "base" or replicas else ("on-demand", "600MB")
        more = f"\n              replicas: {replicas}" if replicas else ""
        docs.append(f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: {name}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: tiny{more}
              state: {state}
              idle_after: 5s
              memory: {{weights: {size}, kv: 0}}
              serve: {{port: {port}, ctx: 512, extra_args: ["--threads", "1", "--parallel", "4"]}}""")
    for i, doc in enumerate(docs):
        (out / f"{i}.yaml").write_text(textwrap.dedent(doc) + "\n")
    return out


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (a role's instances take port + i)."""
    while True:
        first = free_port()
        if first + count > 59999:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


class Soak:
    def __init__(self, root: Path, repo: Path, replicas: int = 0) -> None:
        self.folder: Path | None = None
        self.rollout: tuple[float, float] | None = None  # (began, every instance new) monotonic
        self.root, self.repo, self.replicas = root, repo, replicas
        self.router = free_port()
        self.roles = ("chat",) if replicas else ROLES
        self.ports = ({"chat": free_ports(replicas)} if replicas
                      else {name: free_port() for name in ROLES})
        # every server's port → its unit name (an instance i > 0 of chat is chat/i)
        self.units = ({self.ports["chat"] + i: ("chat" if i == 0 else f"chat/{i}")
                       for i in range(replicas)} if replicas
                      else {port: name for name, port in self.ports.items()})
        self.records: list[dict] = []
        self.kills: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def start(self) -> None:
        folder = self.folder = manifests(self.root, self.router, self.ports, self.replicas)
        self.log = open(self.root / "watch.log", "w")
        env = {**os.environ, "PYTHONPATH": str(self.repo)}
        self.metrics_port = free_port()
        metrics = ["--metrics-addr", f"127.0.0.1:{self.metrics_port}"] if self.replicas else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "-f", str(folder), "--state-dir",
             str(self.root / "state"), "--log-format", "json", "watch", "--stop-on-exit",
             *metrics],
            cwd=self.repo, env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        first = self.roles[0] if self.replicas else "base"
        while time.monotonic() < deadline and (self.models().get(first) != "ready" or (
                self.replicas and len(self.servers()) < self.replicas)):
            time.sleep(0.1)
        if self.models().get(first) != "ready":
            raise RuntimeError(f"the router never listed {first} as ready:\n"
                               + (self.root / "watch.log").read_text()[-3000:])

    def models(self) -> dict[str, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.router}/v1/models",
                                        timeout=2) as r:
                return {m["id"]: m["state"] for m in json.loads(r.read())["data"]}
        except (OSError, ValueError):
            return {}

    def servers(self) -> dict[str, psutil.Process]:
        """Each role's running server (by its port), among the daemon's descendants."""
        found = {}
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for child in children:
            try:
                argv = child.cmdline()
            except psutil.Error:
                continue
            if "--port" in argv:
                name = self.units.get(int(argv[argv.index("--port") + 1]))
                if name is not None:
                    found[name] = child
        return found

    def answered(self) -> dict[str, int]:
        """Requests the router answered 200, by the instance it sent them to (its metrics)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("reconciler_router_requests_total{") and 'code="200"' in line:
                role = line.split('role="', 1)[1].split('"', 1)[0]
                out[role] = out.get(role, 0) + int(float(line.rsplit(" ", 1)[1]))
        return out

    def fds(self) -> int:
        return psutil.Process(self.proc.pid).num_fds()

    def worker(self, seed: int) -> None:
        import openai

        rng = random.Random(seed)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.router}/v1", api_key="none",
                               max_retries=0, timeout=90)
        while not self.stop.is_set():
            role, stream = rng.choice(self.roles), rng.random() < 0.5
            began, outcome = time.monotonic(), "ok"
            try:
                if stream:
                    chunks = list(client.chat.completions.create(
                        model=role, messages=[{"role": "user", "content": "hi"}],
                        max_tokens=8, stream=True))
                    if not chunks or not any(c.choices and c.choices[0].finish_reason
                                             for c in chunks):
                        outcome = "stream-incomplete"
                else:
                    client.chat.completions.create(
                        model=role, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
            except openai.APIStatusError as exc:
                outcome = f"{exc.status_code}: {str(exc.message)[:120]}"
            except Exception as exc:  # noqa: BLE001 — a cut connection, a timeout
                outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
            with self.lock:
                self.records.append({"role": role, "stream": stream, "began": began,
                                     "ended": time.monotonic(), "outcome": outcome})
        client.close()

    def killer(self, every: float, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.wait(every):
            servers = self.servers()
            if not servers:
                continue
            name = rng.choice(sorted(servers))
            try:
                servers[name].send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
            with self.lock:
                self.kills.append((time.monotonic(), name))

    def restart(self, at: float) -> None:
        """``restarted_at`` on the role after ``at`` seconds; then wait until every
        instance runs a server started after it (a new pid on each port)."""
        if self.stop.wait(at) or self.folder is None:
            return
        before = {u: p.pid for u, p in self.servers().items()}
        chat = next(f for f in self.folder.glob("*.yaml") if "kind: InferenceSpec" in f.read_text())
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        chat.write_text(chat.read_text().replace(
            "  state: running", f'  state: running\n  restarted_at: "{stamp}"'))
        began = time.monotonic()
        while not self.stop.wait(0.2):
            now = self.servers()
            if len(now) == len(before) and all(now[u].pid != before.get(u) for u in now):
                self.rollout = (began, time.monotonic())
                return

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def classify(records: list[dict], kills: list[tuple[float, str]], grace: float) -> dict:
    failed = [r for r in records if r["outcome"] != "ok"]
    ours = []
    for r in failed:
        explained = any(_group(role) == r["role"] and r["began"] - 0.5 <= at <= r["ended"] + 0.5
                        or _group(role) == r["role"] and 0 <= r["ended"] - at <= grace
                        for at, role in kills)
        if not explained:
            ours.append(r)
    kinds: dict[str, int] = {}
    for r in failed:
        key = r["outcome"].split(":")[0]
        kinds[key] = kinds.get(key, 0) + 1
    return {"failed": len(failed), "by_kind": kinds, "ours": len(ours),
            "ours_samples": [f"{r['role']} {'stream' if r['stream'] else 'plain'}: "
                             f"{r['outcome']}" for r in ours[:10]],
            "status_503": sum(r["outcome"].startswith("503") for r in failed)}


def _group(unit: str) -> str:
    """An instance's role (``chat/2`` → ``chat``)."""
    return unit.split("/", 1)[0]


def soak(seconds: float, workers: int, kill_every: float, grace: float, settle: float,
         repo: Path, replicas: int = 0, restart_at: float | None = None) -> dict:
    root = Path(tempfile.mkdtemp(prefix="soak-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    run = Soak(root, repo, replicas)
    try:
        run.start()
        time.sleep(1.0)
        baseline = run.fds()
        began = time.monotonic()
        threads = [threading.Thread(target=run.worker, args=(i,)) for i in range(workers)]
        if kill_every > 0:
            threads.append(threading.Thread(target=run.killer, args=(kill_every, 99)))
        if restart_at is not None:
            threads.append(threading.Thread(target=run.restart, args=(restart_at,)))
        for t in threads:
            t.start()
        peak = baseline
        while time.monotonic() - began < seconds:
            time.sleep(0.5)
            peak = max(peak, run.fds())
        run.stop.set()
        for t in threads:
            t.join(120)
        took = time.monotonic() - began
        deadline = time.monotonic() + settle
        after = run.fds()
        while after > baseline and time.monotonic() < deadline:
            time.sleep(0.25)
            after = run.fds()
        log = (root / "watch.log").read_text()
        figures = classify(run.records, run.kills, grace)
        figures.update({
            "seconds": round(took, 1), "workers": workers, "requests": len(run.records),
            "kills": len(run.kills), "fds_baseline": baseline, "fds_peak": peak,
            "fds_after": after, "evictions": _count(log, "stop", "evicted"),
            "cold_starts": _count(log, "start", "demand"),
            "tracebacks": log.count("Traceback"), "log_bytes": len(log)})
        if replicas:
            figures["replicas"] = replicas
            figures["answered_by_instance"] = run.answered()
            figures["by_instance_kills"] = {u: sum(k == u for _, k in run.kills)
                                            for u in sorted(set(run.units.values()))}
            figures["restarts_after_kill"] = _count(log, "start", "crashed") + _count(
                log, "restart", "crashed")
        if restart_at is not None:
            figures["rollout_seconds"] = (round(run.rollout[1] - run.rollout[0], 1)
                                          if run.rollout else None)
            began_r, ended_r = run.rollout or (began + restart_at, time.monotonic())
            figures["failed_in_rollout"] = sum(
                1 for r in run.records if r["outcome"] != "ok"
                and r["began"] <= ended_r and r["ended"] >= began_r)
        took_ok = sorted(r["ended"] - r["began"] for r in run.records if r["outcome"] == "ok")
        if took_ok:
            figures["ok_seconds_p50"] = round(took_ok[len(took_ok) // 2], 2)
            figures["ok_seconds_p99"] = round(took_ok[min(len(took_ok) - 1,
                                                          int(len(took_ok) * 0.99))], 2)
        figures["swaps_per_minute"] = round(figures["evictions"] / (took / 60), 1)
        figures["failed_pct"] = round(100 * figures["failed"] / max(figures["requests"], 1), 2)
        return figures
    finally:
        run.stop.set()
        run.close()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _count(log: str, verb: str, reason: str) -> int:
    """Acting decisions of ``verb`` with ``reason`` that went ok, from the JSON log."""
    n = 0
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "action" and entry.get("verb") == verb and \
                entry.get("reason") == reason and entry.get("ok"):
            n += 1
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--kill-every", type=float, default=20)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--replicas", type=int, default=0,
                        help="soak one role of N instances instead (§12)")
    parser.add_argument("--restart-at", type=float, default=None,
                        help="with --replicas: set restarted_at after this many seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = soak(args.seconds, args.workers, args.kill_every, args.grace, args.settle,
                   args.repo.resolve(), args.replicas, args.restart_at)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>18}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
