"""§13 kill -9 of ``reconcile --once`` at seeded random moments during a rollout.

One node (wave ``rest``, its moment half-way through the window, no gate) runs two roles
the Rollout stages, with the real testbed llama-server pinned as the Program ``llama``.
Each round maybe commits a new generation — both roles' ``ctx`` (a spec change) or the
Program document's version (a Program change: same files, another document, so a new
launch environment) — sets the schedule's clock before or after the node's moment, and
SIGKILLs a real ``--once`` after a random delay within the length of a pass. After every
kill: ``rollout.json`` is absent or parseable, both roles stand on one commit in it, and
every server of ours runs a generation the node had reached (the one it ran before the
pass, one a server ran before it, or the one rollout.json now says) — never HEAD's
before its moment. Every few rounds
and at the end a plain pass converges: both roles on rollout.json's commit, one recorded
server each, nothing of ours unrecorded. The rounds: ``RECONCILER_ROLLOUT_KILL9_ROUNDS``
(default sized to ~20 s), the seed ``RECONCILER_ROLLOUT_KILL9_SEED``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import LLAMA_SERVER, NOBODY, PORT_RANGE, TINY_GGUF, free_port

pytestmark = pytest.mark.e2e

ROUNDS = int(os.environ.get("RECONCILER_ROLLOUT_KILL9_ROUNDS", "10"))
SEED = int(os.environ.get("RECONCILER_ROLLOUT_KILL9_SEED", "30"))
ROLES = ("r1", "r2")
START = "2026-12-02T14:00:00Z"  # window 14:00Z → 16:00Z; the node moves at 15:00Z
BEFORE, AFTER = "2026-12-02T14:30:00Z", "2026-12-02T15:30:00Z"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Node:
    """The node's checkout (a git repository) and state. Generation ``g`` of the manifests:
    both roles' ctx ``256 + 64 × ((g + 1) // 2)`` and the Program's version
    ``b<100 + g // 2>``: an odd step changes the ctx, an even one the Program document."""

    def __init__(self, root: Path) -> None:
        self.root, self.repo, self.state = root, root / "repo", root / "state"
        (self.repo / "manifests").mkdir(parents=True)
        self.state.mkdir()
        git(self.repo, "init", "-q")
        self.ports = {r: free_port() for r in ROLES}
        self.server_sha = _sha(LLAMA_SERVER)
        self.model = (_sha(TINY_GGUF), TINY_GGUF.stat().st_size)
        self.commits: dict[str, int] = {}  # commit → generation

    @staticmethod
    def ctx(g: int) -> int:
        return 256 + 64 * ((g + 1) // 2)

    @staticmethod
    def version(g: int) -> str:
        return f"b{100 + g // 2}"

    def commit(self, g: int) -> str:
        docs = [f"""\
            apiVersion: reconciler/v1
            kind: NodeConfig
            metadata: {{name: node-b, labels: {{reconciler.io/rollout-position: "0.5"}}}}
            spec:
              allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
              serve_programs: {{llamacpp: llama}}
              run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
              stop_grace: 1s
              restart: {{max_restarts: 3, base: 1s, cap: 4s, stable_after: 60s}}
            """, f"""\
            apiVersion: reconciler/v1
            kind: Program
            metadata: {{name: llama}}
            spec:
              runtime: llamacpp
              version: {self.version(g)}
              root: {LLAMA_SERVER.parent}
              entrypoint: {LLAMA_SERVER.name}
              files: [{{path: {LLAMA_SERVER.name}, size: {LLAMA_SERVER.stat().st_size}, sha256: {self.server_sha}}}]
            """, f"""\
            apiVersion: reconciler/v1
            kind: Model
            metadata: {{name: tiny}}
            spec:
              format: gguf
              root: {TINY_GGUF.parent}
              shards: [{{path: {TINY_GGUF.name}, size: {self.model[1]}, sha256: {self.model[0]}}}]
            """, f"""\
            apiVersion: reconciler/v1
            kind: Rollout
            metadata: {{name: up}}
            spec: {{start: "{START}", duration: 2h}}
            """]
        docs += [f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: {r}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: tiny
              serve: {{port: {self.ports[r]}, ctx: {self.ctx(g)}, extra_args: ["--threads", "1"]}}
            """ for r in ROLES]
        text = "---\n".join(textwrap.dedent(d) for d in docs)
        (self.repo / "manifests" / "fleet.yaml").write_text(text)
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", f"generation {g}")
        head = git(self.repo, "rev-parse", "HEAD")
        self.commits[head] = g
        return head

    def once(self, at: str, *, kill_after: float | None = None,
             timeout: float = 60) -> tuple[int, float]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "--once", "--node", "node-b",
             "-f", str(self.repo / "manifests"), "--state-dir", str(self.state)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "RECONCILER_ROLLOUT_NOW": at})
        started = time.monotonic()
        try:
            proc.wait(timeout=kill_after if kill_after is not None else timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        return proc.returncode, time.monotonic() - started

    def runs(self) -> dict[str, str] | None:
        """rollout.json's commit per role (None: absent); a torn file fails the test."""
        path = self.state / "rollout.json"
        if not path.exists():
            return None
        body = json.loads(path.read_text())  # atomic: always whole
        return {role: run["runs"] for role, run in body["roles"].items()}

    def servers(self) -> dict[int, tuple[str, int]]:
        """pid → (role, generation) of every live server of ours (its marker), by what it
        runs: its argv's ctx and its environment's Program version."""
        out = {}
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE or \
                        not proc.cwd().startswith(str(self.state)):
                    continue
                env = proc.environ()
                marker, label = env.get("RECONCILER_INSTANCE"), env.get("RECONCILER_PROGRAM", "")
                argv = proc.cmdline()
            except (psutil.Error, OSError):
                continue
            if not marker:
                continue
            ctx = int(argv[argv.index("--ctx-size") + 1])
            version = label.split()[1]
            g = next(g for g in range(ROUNDS + 4)
                     if self.ctx(g) == ctx and self.version(g) == version)
            out[proc.pid] = (marker.rsplit("-", 1)[0], g)
        return out

    def recorded(self) -> dict[str, int | None]:
        from reconciler.state.store import Store

        with Store(str(self.state)) as store:
            return {r.name: r.pid for r in store.roles()}

    def stop_all(self) -> None:
        for pid in self.servers():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.stop_all()


def _converged(node: Node, at: str) -> int:
    """Plain passes until both roles run rollout.json's one generation, each on one
    recorded server and nothing of ours unrecorded; the generation."""
    for _ in range(6):
        code, _ = node.once(at)
        assert code in (0, 2), code
        runs, servers, recorded = node.runs(), node.servers(), node.recorded()
        gens = {node.commits[c] for c in (runs or {}).values()}
        if len(gens) == 1 and sorted(r for r, _ in servers.values()) == list(ROLES) and \
                {g for _, g in servers.values()} == gens and \
                set(servers) == {recorded.get(r) for r in ROLES}:
            return gens.pop()
        time.sleep(0.3)
    raise AssertionError(f"did not converge: runs {runs}, servers {servers}, recorded {recorded}")


def test_kill_9_at_random_moments_of_a_rollout_pass_leaves_one_whole_generation(node) -> None:
    """§13 done-when: ``--once`` SIGKILLed at seeded random moments while a rollout stages
    spec and Program-document changes: after every kill rollout.json is whole, both roles
    stand on one commit, every server of ours runs a generation the node had reached (never
    HEAD's before its moment); plain passes converge to one recorded server per role on
    rollout.json's generation, nothing of ours unrecorded."""
    rng = random.Random(SEED)
    g = 0
    node.commit(g)
    assert _converged(node, BEFORE) == 0  # the first pass under a rollout runs HEAD
    started = time.monotonic()
    head = node.commit(g := g + 1)
    _, length = node.once(AFTER)  # an unkilled pass that restarts both roles (a move)
    assert node.runs() == {r: head for r in ROLES}
    reached = g  # the generation the node has taken
    phases: dict[str, int] = {}
    kills = 0
    for n in range(ROUNDS):
        if rng.random() < 0.6:
            node.commit(g := g + 1)
        at = rng.choice((BEFORE, AFTER))
        was = {node.commits[c] for c in (node.runs() or {}).values()} or {reached}
        running = {s for _, s in node.servers().values()}  # (a killed pass: maybe part-way)
        # Half over the whole pass, half over its second half (where it acts: the first
        # part of a pass is Python starting and reading the manifests).
        delay = length * (rng.uniform(0.0, 1.2) if n % 2 else rng.uniform(0.5, 1.1))
        code, _ = node.once(at, kill_after=delay)
        killed = code == -signal.SIGKILL
        kills += killed
        runs = node.runs()
        assert runs is not None and set(runs) == set(ROLES), runs
        now = {node.commits[c] for c in runs.values()}
        assert len(now) == 1, f"roles on two commits: {runs}"  # one whole generation
        (gen,) = now
        if at == BEFORE:
            assert gen in was, (gen, was)  # nothing moved before its moment
        else:
            assert gen in was | {g}, (gen, was, g)
        servers = node.servers()
        assert {s for _, s in servers.values()} <= running | was | {gen}, (servers, was, gen)
        if at == BEFORE:
            phase = "holding (before its moment)"
        elif g in was:
            phase = "in sync"
        else:  # a move: killed before or after rollout.json took it
            phase = "moving, rollout.json new" if gen == g else "moving, rollout.json old"
        if killed:
            phases[phase] = phases.get(phase, 0) + 1
        if n % 5 == 4:  # a plain pass at the same clock: HEAD after the moment
            assert _converged(node, at) == (g if at == AFTER else gen)
    final = _converged(node, AFTER)
    assert final == g, (final, g)  # the window has run out: HEAD everywhere
    took = time.monotonic() - started
    print(f"rollout kill -9: {ROUNDS} rounds, {kills} kills, pass length {length:.2f}s, "
          f"{took:.1f}s; kills by phase: {dict(sorted(phases.items()))}")
    assert kills >= ROUNDS // 3, phases
