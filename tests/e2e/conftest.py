"""Shared fixtures for end-to-end tests: a real world with real llama.cpp servers.

``world`` gives each test its own directory under /var/tmp (reachable by the
unprivileged uid the servers run as — pytest's own tmp dirs are 0700 under
root), a Model manifest for the testbed's tiny GGUF with its real digest, a
NodeConfig with a port range, and ``world.reconcile(...)`` to run the real
command line. At teardown every process that carries one of this world's
instance markers or runs inside its state directory is killed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.support import roles

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA_SERVER = TESTBED / "bin" / "llama-server"
TINY_GGUF = TESTBED / "models" / "tiny.gguf"
NOBODY = 65534
PORT_RANGE = (20000, 29999)


def _testbed_or_skip() -> None:
    if LLAMA_SERVER.exists() and TINY_GGUF.exists():
        return
    message = f"the real llama.cpp testbed is missing ({LLAMA_SERVER}): run `bash testbed/setup.sh`"
    if os.environ.get("CI"):
        pytest.fail(message)  # in CI a missing testbed is a broken build, not a skip
    pytest.skip(reason=message)


def free_port() -> int:
    """A loopback port inside PORT_RANGE that nothing listens on right now."""
    for _ in range(200):
        port = PORT_RANGE[0] + int.from_bytes(os.urandom(2), "big") % (PORT_RANGE[1] - PORT_RANGE[0])
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return value
        time.sleep(interval)


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.state = root / "state"
        self.manifests.mkdir()
        self.digest = hashlib.sha256(TINY_GGUF.read_bytes()).hexdigest()
        self.size = TINY_GGUF.stat().st_size

    # ------------------------------------------------------------ manifests

    def write(self, name: str, text: str) -> Path:
        path = self.manifests / name
        path.write_text(textwrap.dedent(text))
        return path

    def remove(self, name: str) -> None:
        (self.manifests / name).unlink()

    def node(self, *, program: str | Path = LLAMA_SERVER, extra: str = "",
             restart: str = "{max_restarts: 3, base: 1s, cap: 8s, stable_after: 60s}",
             stop_grace: str = "1s", budget: str | None = None,
             mlx_program: str | Path | None = None) -> None:
        budget_line = f"\n          memory_budget: {budget}" if budget else ""
        mlx = f", mlx-lm: {mlx_program}" if mlx_program else ""
        self.write("node.yaml", f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: test-node}}
        spec:
          allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
          serve_programs: {{llamacpp: {program}{mlx}}}
          run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
          stop_grace: {stop_grace}
          probe_timeout: 2s
          restart: {restart}{budget_line}
        {extra}""")

    def model(self, name: str = "tiny") -> None:
        self.write(f"model-{name}.yaml", f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: {name}}}
        spec:
          format: gguf
          root: {TINY_GGUF.parent}
          shards:
            - {{path: {TINY_GGUF.name}, size: {self.size}, sha256: {self.digest}}}
        """)

    def role(self, name: str, port: int, *, ctx: int = 512, state: str = "running",
             memory: str = "", extra_args: str = '["--threads", "1"]') -> None:
        self.write(f"role-{name}.yaml", roles.inference_spec(
            name, port, state=state, ctx=ctx, extra_args=extra_args, raw=memory))

    def ollama_model(self, name: str, tag: str) -> None:
        """A Model for an Ollama tag: Ollama keeps its own files (no root, no shards)."""
        self.write(f"model-{name}.yaml", f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: {name}}}
        spec:
          format: ollama
          source: {{ollama_tag: "{tag}"}}
        """)

    def ollama_role(self, name: str, port: int, *, model: str, mode: str = "managed",
                    state: str = "running", keep_alive: str = "10m") -> None:
        """An InferenceSpec driving a running Ollama (or its double) on ``port``."""
        self.write(f"role-{name}.yaml", roles.inference_spec(
            name, port, runtime="ollama", mode=mode, model=model, state=state, ctx=None,
            extra_args=None, keep_alive=keep_alive))

    # ------------------------------------------------------------ commands

    def reconcile(self, *args: str, timeout: float = 60.0, env: dict | None = None
                  ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", "-f", str(self.manifests),
             "--state-dir", str(self.state), *args],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {})},
        )

    def store(self):
        from reconciler.state.store import Store

        return Store(self.state)

    def record(self, name: str):
        with self.store() as store:
            return store.role(name)

    def pid(self, name: str) -> int | None:
        record = self.record(name)
        return record.pid if record else None

    # ------------------------------------------------------------ teardown

    def processes(self) -> list[psutil.Process]:
        """Every live process of this world: cwd anywhere under its root.

        The root, not only the state directory: a node may put its instance
        directories elsewhere (``data_root``, as test_own_faults does), and its
        servers must not outlive the test.
        """
        mine = []
        root = str(self.root)
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                cwd = proc.cwd()
            except (psutil.Error, OSError):
                continue
            if cwd == root or cwd.startswith(root + "/"):
                mine.append(proc)
        return mine

    def kill_all(self) -> None:
        for proc in self.processes():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.fixture
def world():
    _testbed_or_skip()
    root = Path(tempfile.mkdtemp(prefix="reconciler-e2e-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    w = World(root)
    try:
        yield w
    finally:
        w.kill_all()
        shutil.rmtree(root, ignore_errors=True)


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """A plain GET on loopback without proxies: (status, body), (0, b'') when refused."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""
