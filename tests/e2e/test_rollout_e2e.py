"""§13 a staged rollout on three nodes from one bare repository, real servers, a real Prometheus.

Each node is what a timer runs: its clone, its state directory, ``git pull &&
reconcile --once --node X --metrics-file …``. Each node's metrics file is
served on loopback and scraped every second by Debian's ``prometheus`` with
deploy/prometheus/reconciler-rollout-rules.yml loaded; the Rollout's gate asks
it the query §13 documents. The schedule's clock is ``$RECONCILER_ROLLOUT_NOW``
(a rehearsal's clock: servers, backoffs and the record keep the real one), so
the window of hours passes in seconds. node-a is the canary; node-b and node-c
move in wave ``rest`` at positions 0.25 and 0.75. Each node runs its own role
(the nodes share this machine's loopback: one port per server).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import LLAMA_SERVER, NOBODY, PORT_RANGE, free_port
from tests.e2e.test_fleet import NODES, Fleet, fleet, git, processes_under  # noqa: F401
from tests.fleet.test_deploy import need
from tests.support import exposition

pytestmark = pytest.mark.e2e

RULES = Path(__file__).parents[2] / "deploy" / "prometheus" / "reconciler-rollout-rules.yml"
QUERY = ('(count(reconciler:node_healthy_revision{revision="$revision", node=~"$nodes"} == 1)'
         ' or vector(0)) >= bool $count')
LABELS = {"node-a": {"ring": "canary"}, "node-b": {"reconciler.io/rollout-position": "0.25"},
          "node-c": {"reconciler.io/rollout-position": "0.75"}}
# The window 14:00Z → 17:00Z: canary 14:00Z, rest opens 15:30Z, node-b 15:52:30Z, node-c 16:37:30Z.
BEFORE, CANARY, B_TIME, LATE = ("2026-12-02T13:00:00Z", "2026-12-02T15:00:00Z",
                                "2026-12-02T16:00:00Z", "2026-12-02T18:00:00Z")


class Scraped:
    """The nodes' metrics files on loopback, and a Prometheus scraping them every second."""

    def __init__(self, root: Path, files: dict[str, Path]) -> None:
        self.servers = [_serve_file(path) for path in files.values()]
        self.port = free_port()
        targets = ", ".join(f'"127.0.0.1:{s.server_address[1]}"' for s in self.servers)
        (root / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{RULES}]\n"
            "scrape_configs:\n"
            f"  - {{job_name: nodes, honor_labels: true, static_configs: [{{targets: [{targets}]}}]}}\n")
        self.log = (root / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [need("prometheus"), f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=self.log)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        for s in self.servers:
            s.shutdown()
            s.server_close()


def _serve_file(path: Path):
    """The node's exposition as the test last wrote it (nothing yet: an empty body)."""
    def body() -> bytes:
        try:
            return path.read_bytes()
        except OSError:
            return b""
    return exposition.serve(body)


class Rolling:
    """The fleet of test_fleet.py, with a Rollout, per-node labels and the schedule's clock."""

    def __init__(self, fleet: Fleet, *, gate: bool = True) -> None:
        self.fleet = fleet
        self.ports = {n: free_port() for n in NODES}
        for n in NODES:
            self.fleet.state(n).mkdir(parents=True)
        self.prom = Scraped(fleet.root, {n: self.metrics(n) for n in NODES}) if gate else None

    def metrics(self, node: str) -> Path:
        return self.fleet.state(node) / "metrics.prom"

    def nodes_yaml(self, program: str = str(LLAMA_SERVER)) -> str:
        docs = []
        for name in NODES:
            docs.append(textwrap.dedent(f"""\
                apiVersion: reconciler/v1
                kind: NodeConfig
                metadata: {{name: {name}, labels: {json.dumps(LABELS[name])}}}
                spec:
                  allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
                  serve_programs: {{llamacpp: {program}}}
                  run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
                  stop_grace: 1s
                  restart: {{max_restarts: 0}}
                """))
        return "---\n".join(docs)

    @staticmethod
    def program_yaml() -> str:
        """The testbed's llama-server pinned as the Program ``llama`` (§14)."""
        import hashlib

        sha = hashlib.sha256(LLAMA_SERVER.read_bytes()).hexdigest()
        return textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Program
            metadata: {{name: llama}}
            spec:
              runtime: llamacpp
              version: b11434
              root: {LLAMA_SERVER.parent}
              entrypoint: {LLAMA_SERVER.name}
              files: [{{path: {LLAMA_SERVER.name}, size: {LLAMA_SERVER.stat().st_size}, sha256: {sha}}}]
            """)

    def program_of(self, node: str) -> str | None:
        """The Program the node's server was started with (its RECONCILER_PROGRAM)."""
        import psutil

        pid = self.pids()[node]
        return psutil.Process(pid).environ().get("RECONCILER_PROGRAM") if pid else None

    def roles_yaml(self, ctx: int = 256, kv_quant: str = "") -> str:
        extra = f", kv_quant: {kv_quant}" if kv_quant else ""
        return "---\n".join(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: r-{n}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: tiny
              serve: {{port: {self.ports[n]}, ctx: {ctx}, extra_args: ["--threads", "1"]{extra}}}
              placement: {{nodes: [{n}]}}
            """) for n in NODES)

    def rollout_yaml(self, paused: bool = False) -> str:
        gate = "" if self.prom is None else (
            f"  gate:\n    prometheus:\n      url: http://127.0.0.1:{self.prom.port}\n"
            f"      query: '{QUERY}'\n")
        return textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Rollout
            metadata: {{name: up}}
            spec:
              start: "2026-12-02T14:00:00Z"
              duration: 3h
              paused: {str(paused).lower()}
              waves:
                - {{name: canary, canary: true, node_selector: {{match_labels: {{ring: canary}}}}}}
            """) + gate

    def converge(self, node: str, at: str) -> subprocess.CompletedProcess:
        clone = self.fleet.clone(node)
        if not clone.exists():
            git(self.fleet.root, "clone", "-q", "-b", "main", str(self.fleet.origin), str(clone))
        else:
            git(clone, "pull", "-q", "--ff-only")
        import os

        return subprocess.run(
            [sys.executable, "-m", "reconciler", "--once", "--node", node,
             "-f", str(clone / "manifests"), "--state-dir", str(self.fleet.state(node)),
             "--metrics-file", str(self.metrics(node))],
            capture_output=True, text=True, timeout=90,
            env={**os.environ, "RECONCILER_ROLLOUT_NOW": at})

    def reconcile(self, node: str, *args: str) -> subprocess.CompletedProcess:
        import os

        return subprocess.run(
            [sys.executable, "-m", "reconciler", "--node", node, "-f",
             str(self.fleet.clone(node) / "manifests"), "--state-dir",
             str(self.fleet.state(node)), *args],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "RECONCILER_ROLLOUT_NOW": CANARY})

    def pids(self) -> dict[str, int | None]:
        return {n: self.fleet.running(n).get(f"r-{n}") for n in NODES}

    def argv_has(self, node: str, text: str) -> bool:
        import psutil

        pid = self.pids()[node]
        return pid is not None and text in " ".join(psutil.Process(pid).cmdline())


@pytest.fixture
def rolling(fleet):  # noqa: F811
    r = Rolling(fleet)
    try:
        yield r
    finally:
        r.prom.close()


def test_a_bad_commit_stops_at_the_canary_a_good_one_reaches_all_in_order(rolling) -> None:
    """§13 end to end: a broken launch reaches the canary only, which rolls back by itself
    (status, events, metric) while the gate stays closed; a good commit reaches node-a,
    then node-b once the gate has seen the canary healthy, then node-c; a pause holds
    everyone; a revert applies at once on the node that had moved; a Program change
    reaches the canary only while the others wait for their moment."""
    f, r = rolling.fleet, rolling
    f.commit({"nodes.yaml": r.nodes_yaml(), "tiny.yaml": f.model, "roles.yaml": r.roles_yaml(),
              "rollout.yaml": r.rollout_yaml()}, "three roles, a rollout")
    for n in NODES:
        out = r.converge(n, BEFORE)
        assert out.returncode == 0, out.stdout + out.stderr
    first = r.pids()
    assert all(first.values()), first

    # A broken launch: the tiny model's head dim refuses q8_0 (the server exits at once).
    f.commit({"roles.yaml": r.roles_yaml(kv_quant="q8_0")}, "q8_0")
    bad = git(f.author, "rev-parse", "HEAD").strip()
    for _ in range(4):
        r.converge("node-a", CANARY)
        if r.fleet.running("node-a").get("r-node-a") and not r.argv_has("node-a", "q8_0"):
            break
    assert r.pids()["node-a"] and not r.argv_has("node-a", "q8_0")  # back on the revision before
    events = r.reconcile("node-a", "events", "--json")
    assert "rollback" in events.stdout and "gave up" in events.stdout, events.stdout
    status = r.reconcile("node-a", "status")
    assert "rolled back r-node-a" in status.stdout, status.stdout
    assert f'reconciler_rollout_rolled_back{{node="node-a",revision="{bad}",role="r-node-a"}} 1.0' \
        in r.metrics("node-a").read_text()
    time.sleep(2.5)  # scraped: the canary's rollback closes the gate
    for n in ("node-b", "node-c"):
        out = r.converge(n, LATE)  # their moment has long come; the gate has not opened
        assert f"= keep r-{n}" in out.stdout and "gate closed" in out.stdout, out.stdout
    assert {n: r.pids()[n] for n in ("node-b", "node-c")} == {
        n: first[n] for n in ("node-b", "node-c")}  # they never ran it

    # A good commit: in order, as the schedule's clock moves and the gate opens.
    f.commit({"roles.yaml": r.roles_yaml(ctx=512)}, "ctx 512")
    out = r.converge("node-a", CANARY)
    assert out.returncode == 0 and "~ restart r-node-a" in out.stdout, out.stdout
    for n in ("node-b", "node-c"):
        waiting = r.converge(n, CANARY)
        assert "rollout: up: wave canary first; this node moves at" in waiting.stdout, waiting.stdout
    deadline = time.monotonic() + 15
    while not r.argv_has("node-b", "512") and time.monotonic() < deadline:
        r.converge("node-a", CANARY)  # the canary's metrics, fresh for the scrape
        time.sleep(1)
        r.converge("node-b", B_TIME)
    assert r.argv_has("node-b", "512")
    c_wait = r.converge("node-c", B_TIME)
    assert not r.argv_has("node-c", "512") and "this node moves at 16:37:30Z" in c_wait.stdout
    r.converge("node-b", B_TIME)
    time.sleep(2.5)
    r.converge("node-c", LATE)
    assert all(r.argv_has(n, "512") for n in NODES)
    moved = r.pids()

    # Paused: a new change holds everyone where they stand, past every moment.
    f.commit({"roles.yaml": r.roles_yaml(ctx=1024), "rollout.yaml": r.rollout_yaml(paused=True)},
             "ctx 1024, paused")
    for n in NODES:
        out = r.converge(n, LATE)
        assert "paused (Rollout up)" in out.stdout, out.stdout
    assert r.pids() == moved
    # Unpaused at canary time: node-a takes 1024; then a revert reaches it at once.
    f.commit({"rollout.yaml": r.rollout_yaml()}, "unpause")
    r.converge("node-a", CANARY)
    assert r.argv_has("node-a", "1024")
    f.commit({"roles.yaml": r.roles_yaml(ctx=512)}, "revert ctx 1024")
    out = r.converge("node-a", BEFORE)  # before the window even starts: a revert never waits
    assert "~ restart r-node-a" in out.stdout, out.stdout
    assert r.argv_has("node-a", "512")
    for n in ("node-b", "node-c"):
        assert "No changes" in r.converge(n, BEFORE).stdout

    # A Program change (§13: staged like a spec change): the nodes now run the same binary
    # pinned as the Program `llama` — a new launch environment. The canary takes it at its
    # moment; node-b and node-c keep the program they run until theirs.
    f.commit({"nodes.yaml": r.nodes_yaml(program="llama"), "llama.yaml": r.program_yaml()},
             "pin llama-server as a Program")
    kept = {n: r.pids()[n] for n in ("node-b", "node-c")}
    out = r.converge("node-a", CANARY)
    assert "~ restart r-node-a" in out.stdout, out.stdout
    assert (r.program_of("node-a") or "").startswith("llama b11434 sha256:")
    for n in ("node-b", "node-c"):
        out = r.converge(n, CANARY)
        assert f"= keep r-{n}" in out.stdout and "wave canary first" in out.stdout, out.stdout
        assert r.pids()[n] == kept[n] and r.program_of(n) is None


@pytest.mark.parametrize("point", ["rollout-written", "stopped", "after-spawn", "recording"])
def test_kill_9_while_the_canary_moves_leaves_one_whole_revision(fleet, point) -> None:  # noqa: F811
    """§13 kill -9 of ``--once`` while the canary takes a staged change (at the failpoint
    ``point``: the rollout file written, the old server stopped, the new one spawned, the
    record room), then the next pass: the canary runs exactly one server, on HEAD's spec,
    and rollout.json says HEAD; the node that waits never ran anything new."""
    r = Rolling(fleet, gate=False)  # the canary's move needs no gate
    fleet.commit({"nodes.yaml": r.nodes_yaml(), "tiny.yaml": fleet.model,
                  "roles.yaml": r.roles_yaml(), "rollout.yaml": r.rollout_yaml()}, "c1")
    for n in ("node-a", "node-b"):
        assert r.converge(n, BEFORE).returncode == 0
    b_pid = r.pids()["node-b"]
    fleet.commit({"roles.yaml": r.roles_yaml(ctx=512)}, "ctx 512")
    head = git(fleet.author, "rev-parse", "HEAD").strip()
    import os

    git(fleet.clone("node-a"), "pull", "-q", "--ff-only")
    killed = subprocess.run(
        [sys.executable, "-m", "reconciler", "--once", "--node", "node-a", "-f",
         str(fleet.clone("node-a") / "manifests"), "--state-dir", str(fleet.state("node-a"))],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "RECONCILER_ROLLOUT_NOW": CANARY, "RECONCILER_FAILPOINT": point})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    out = r.converge("node-a", CANARY)
    assert out.returncode == 0, out.stdout + out.stderr
    servers = [p for p in processes_under(fleet.root)
               if "llama-server" in " ".join(p.cmdline())
               and str(r.ports["node-a"]) in p.cmdline()]
    assert len(servers) == 1 and "512" in servers[0].cmdline(), [p.cmdline() for p in servers]
    runs = json.loads((fleet.state("node-a") / "rollout.json").read_text())["roles"]
    assert runs["r-node-a"]["runs"] == head
    assert r.converge("node-b", CANARY).returncode == 0
    assert r.pids()["node-b"] == b_pid and not r.argv_has("node-b", "512")

