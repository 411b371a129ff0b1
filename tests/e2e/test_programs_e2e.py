"""§14 end to end with the real compiled llama-server: a role runs a Program, checked at start.

The binary is copied into the test's own directory (the shared testbed is never touched),
pinned with `reconcile programs add`, and the role is started from it; one byte appended
to the copy refuses the next start, and capabilities/status say why.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from tests.e2e.conftest import LLAMA_SERVER, free_port, wait_for
from tests.e2e.test_once import alive, converge, ready

pytestmark = pytest.mark.e2e


def test_a_role_runs_its_program_and_a_changed_byte_refuses_the_next_start(world):
    """§14: the pinned copy runs (argv[0] in the Program's root, RECONCILER_PROGRAM in its
    environment, the testbed's build 0 said as not confirmed); a byte appended to it refuses
    the next start with both digests and no server."""
    bindir = world.root / "llama-b11434"
    bindir.mkdir()
    os.chmod(bindir, 0o755)
    copy = bindir / "llama-server"
    shutil.copy(LLAMA_SERVER, copy)
    os.chmod(copy, 0o755)
    out = world.reconcile("programs", "add", str(copy), "--version", "b11434",
                          "-o", str(world.manifests / "program.yaml"))
    assert out.returncode == 0, out.stderr
    port = free_port()
    world.node(program="llama-b11434")
    world.model()
    world.role("chat", port)
    assert world.reconcile("validate").returncode == 0
    converge(world)
    assert ready(port, 30)
    pid = world.pid("chat")
    import json
    (row,) = json.loads(world.reconcile("status", "--json").stdout)["roles"]
    assert (row["program"]["name"], row["program"]["version"]) == ("llama-b11434", "b11434")
    assert os.readlink(f"/proc/{pid}/exe") == str(copy)
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    assert any(e.startswith(b"RECONCILER_PROGRAM=llama-b11434 b11434 sha256:") for e in environ)
    def said() -> str | None:
        out = world.reconcile("status").stdout
        return out if "not confirmed" in out else None
    out = wait_for(said, 20)
    assert out and "program llama-b11434 version b11434 not confirmed" in out, \
        world.reconcile("status").stdout + world.reconcile("plan", "--json").stdout

    os.kill(pid, signal.SIGKILL)  # (a running binary cannot be written: ETXTBSY)
    assert wait_for(lambda: not alive(pid), 10)
    def appended() -> bool:
        try:
            with open(copy, "ab") as f:
                f.write(b"\0")
            return True
        except OSError:  # ETXTBSY until the kernel has let go of the killed image
            return False
    assert wait_for(appended, 10)
    out = world.reconcile("--once")
    assert "program_unverified" in out.stdout, out.stdout
    assert "program llama-b11434: llama-server has changed: its sha256 is" in out.stdout
    assert world.pid("chat") is None or not alive(world.pid("chat"))
    status = world.reconcile("status")
    assert "llama-server has changed" in status.stdout, status.stdout
    caps = world.reconcile("capabilities")
    assert "llama-b11434 b11434" in caps.stdout and "llama-server has changed" in caps.stdout, \
        caps.stdout
