"""A fleet on one machine (§10): one bare git origin, three nodes pulling and converging.

Each node is what a timer would run: its own clone of the origin, its own
state directory and ``--node`` name, and every round ``git pull --ff-only &&
reconcile --once --node X``. The servers are real llama.cpp servers running
as uid 65534. All nodes share this machine's loopback, so a role runs on one
node at a time here (two nodes serving one port would see each other's
server as foreign): the nodes converge in order, so a role's old node stops
it before its new node starts it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import (
    LLAMA_SERVER, NOBODY, PORT_RANGE, TINY_GGUF, _testbed_or_skip, free_port, http_get, wait_for,
)

pytestmark = pytest.mark.e2e

NODES = ("node-a", "node-b", "node-c")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, timeout=60)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


class Fleet:
    """An origin, an author's clone, and three nodes with clones and state directories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.origin = root / "origin.git"
        self.author = root / "author"
        git(root, "init", "-q", "--bare", "-b", "main", str(self.origin))
        git(root, "clone", "-q", str(self.origin), str(self.author))
        git(self.author, "checkout", "-q", "-b", "main")
        digest = hashlib.sha256(TINY_GGUF.read_bytes()).hexdigest()
        self.model = textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Model
            metadata: {{name: tiny}}
            spec:
              format: gguf
              root: {TINY_GGUF.parent}
              shards: [{{path: {TINY_GGUF.name}, size: {TINY_GGUF.stat().st_size}, sha256: {digest}}}]
            """)

    # ------------------------------------------------------------ the author's side

    def nodes_yaml(self, labels: dict[str, dict[str, str]] | None = None) -> str:
        docs = []
        for name in NODES:
            mine = (labels or {}).get(name, {})
            docs.append(textwrap.dedent(f"""\
                apiVersion: reconciler/v1
                kind: NodeConfig
                metadata: {{name: {name}, labels: {json.dumps(mine)}}}
                spec:
                  allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
                  serve_programs: {{llamacpp: {LLAMA_SERVER}}}
                  run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
                  stop_grace: 1s
                """))
        return "---\n".join(docs)

    @staticmethod
    def role_yaml(name: str, port: int, placement: str, ctx: int = 256) -> str:
        return textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: InferenceSpec
            metadata: {{name: {name}}}
            spec:
              runtime: llamacpp
              mode: managed
              model: tiny
              serve: {{port: {port}, ctx: {ctx}, extra_args: ["--threads", "1"]}}
              placement: {placement}
            """)

    def commit(self, files: dict[str, str | None], message: str) -> None:
        """Write (or, with None, delete) files under manifests/, commit and push."""
        folder = self.author / "manifests"
        folder.mkdir(exist_ok=True)
        (folder / "README.md").write_text("the fleet's manifests\n")  # keeps the directory
        for name, text in files.items():
            if text is None:
                (folder / name).unlink()
            else:
                (folder / name).write_text(text)
        git(self.author, "add", "-A")
        git(self.author, "commit", "-qm", message)
        git(self.author, "push", "-q", "origin", "main")

    # ------------------------------------------------------------ the nodes' side

    def clone(self, node: str) -> Path:
        return self.root / node / "checkout"

    def state(self, node: str) -> Path:
        return self.root / node / "state"

    def pull_and_converge(self, node: str, *extra: str) -> subprocess.CompletedProcess:
        """What the timer runs: git pull --ff-only, then reconcile --once --node NODE."""
        clone = self.clone(node)
        if not clone.exists():
            clone.parent.mkdir(exist_ok=True)
            git(self.root, "clone", "-q", "-b", "main", str(self.origin), str(clone))
        else:
            git(clone, "pull", "-q", "--ff-only")
        return subprocess.run(
            [sys.executable, "-m", "reconciler", "--once", "--node", node,
             "-f", str(clone / "manifests"), "--state-dir", str(self.state(node)), *extra],
            capture_output=True, text=True, timeout=90)

    def round(self) -> dict[str, subprocess.CompletedProcess]:
        return {node: self.pull_and_converge(node) for node in NODES}

    def running(self, node: str) -> dict[str, int]:
        """Role → pid of every live server this node's store records."""
        from reconciler.state.store import Store

        if not (self.state(node) / "state.db").exists():
            return {}
        with Store(str(self.state(node))) as store:
            records = store.roles()
        return {r.name: r.pid for r in records if r.pid is not None and _alive(r.pid)}



def processes_under(root: Path) -> list[psutil.Process]:
    """Every live process working inside ``root``: the fleet's servers."""
    mine = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.cwd().startswith(str(root)):
                mine.append(proc)
        except (psutil.Error, OSError):
            continue
    return mine


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ready(port: int) -> bool:
    return bool(wait_for(lambda: http_get(port, "/health")[0] == 200, 20.0))


@pytest.fixture
def fleet():
    _testbed_or_skip()
    root = Path(tempfile.mkdtemp(prefix="reconciler-fleet-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    try:
        yield Fleet(root)
    finally:
        for proc in processes_under(root):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(root, ignore_errors=True)


def ok(results: dict[str, subprocess.CompletedProcess]) -> None:
    for node, out in results.items():
        assert out.returncode == 0, f"{node}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"


def test_a_commit_moves_a_role_from_a_to_b_and_c_is_untouched(fleet):
    """a stops the moved role, b starts it, c does nothing; fleet --diff names exactly that."""
    port, other = free_port(), free_port()
    fleet.commit({"nodes.yaml": fleet.nodes_yaml(), "tiny.yaml": fleet.model,
                  "coder.yaml": fleet.role_yaml("coder", port, "{nodes: [node-a]}"),
                  "chat.yaml": fleet.role_yaml("chat", other, "{nodes: [node-c]}")}, "coder on a")
    ok(fleet.round())
    assert set(fleet.running("node-a")) == {"coder"} and ready(port)
    c_pid = fleet.running("node-c")["chat"]

    fleet.commit({"coder.yaml": fleet.role_yaml("coder", port, "{nodes: [node-b]}")}, "move")
    diff = subprocess.run([sys.executable, "-m", "reconciler", "-f",
                           str(fleet.author / "manifests"), "fleet", "--diff", "HEAD~1"],
                          capture_output=True, text=True, timeout=60)
    assert diff.returncode == 2, diff.stderr
    assert diff.stdout.splitlines() == ["- node-a coder", "+ node-b coder",
                                        "2 changes on 2 nodes."]
    results = fleet.round()
    ok(results)
    assert f"- stop coder :{port} (removed: placed on node-b)" in results["node-a"].stdout
    assert f"+ start coder :{port} (missing)" in results["node-b"].stdout
    assert "No changes" in results["node-c"].stdout
    assert fleet.running("node-a") == {} and set(fleet.running("node-b")) == {"coder"}
    assert fleet.running("node-c") == {"chat": c_pid}
    assert ready(port)
    again = fleet.round()
    ok(again)
    assert all("No changes" in out.stdout for out in again.values())


def test_a_label_selected_role_follows_the_label(fleet):
    """The role runs exactly on the labelled node; relabelling moves it there."""
    port = free_port()
    selected = fleet.role_yaml("sel", port, "{node_selector: {match_labels: {gpu: big}}}")
    fleet.commit({"nodes.yaml": fleet.nodes_yaml({"node-b": {"gpu": "big"}}),
                  "tiny.yaml": fleet.model, "sel.yaml": selected}, "label b")
    ok(fleet.round())
    assert [set(fleet.running(n)) for n in NODES] == [set(), {"sel"}, set()]
    assert ready(port)

    fleet.commit({"nodes.yaml": fleet.nodes_yaml({"node-c": {"gpu": "big"}})}, "relabel")
    results = fleet.round()
    ok(results)
    assert f"- stop sel :{port} (removed: placed on node-c)" in results["node-b"].stdout
    assert [set(fleet.running(n)) for n in NODES] == [set(), set(), {"sel"}]
    assert ready(port)


def test_an_invalid_commit_changes_nothing_anywhere_and_a_revert_converges(fleet):
    """Every node keeps what it runs and reports the problem; git revert → all converge."""
    ports = {n: free_port() for n in NODES}
    roles = {f"r-{n}.yaml": fleet.role_yaml(f"r-{n}", ports[n], f"{{nodes: [{n}]}}")
             for n in NODES}
    fleet.commit({"nodes.yaml": fleet.nodes_yaml(), "tiny.yaml": fleet.model, **roles}, "one each")
    ok(fleet.round())
    before = {n: fleet.running(n) for n in NODES}
    assert all(len(pids) == 1 for pids in before.values())

    broken = fleet.role_yaml("r-node-a", ports["node-a"], "{nodes: [node-a]}", ctx=512)
    fleet.commit({"r-node-a.yaml": broken.replace("mode: managed", "mode: managed\n  modle: x")},
                 "a typo")
    results = fleet.round()
    for node, out in results.items():
        assert out.returncode == 1, out.stdout
        assert "r-node-a.yaml:7: $.spec.modle: unknown key 'modle'" in out.stderr
        assert "nothing was changed" in out.stderr
    assert {n: fleet.running(n) for n in NODES} == before

    git(fleet.author, "revert", "--no-edit", "HEAD")
    git(fleet.author, "push", "-q", "origin", "main")
    results = fleet.round()
    ok(results)
    assert all("No changes" in out.stdout for out in results.values())
    assert {n: fleet.running(n) for n in NODES} == before


def test_deleting_every_manifest_stops_nothing_without_allow_empty(fleet):
    """A commit that deletes every manifest: every node keeps its servers and says why."""
    ports = {n: free_port() for n in NODES}
    roles = {f"r-{n}.yaml": fleet.role_yaml(f"r-{n}", ports[n], f"{{nodes: [{n}]}}")
             for n in NODES}
    fleet.commit({"nodes.yaml": fleet.nodes_yaml(), "tiny.yaml": fleet.model, **roles}, "one each")
    ok(fleet.round())
    before = {n: fleet.running(n) for n in NODES}

    fleet.commit({name: None for name in ["nodes.yaml", "tiny.yaml", *roles]}, "delete all")
    results = fleet.round()
    ok(results)
    for node, out in results.items():
        assert f"= keep r-{node} :{ports[node]} (empty_manifests" in out.stdout
    assert {n: fleet.running(n) for n in NODES} == before
    for node in NODES:
        assert ready(ports[node])
