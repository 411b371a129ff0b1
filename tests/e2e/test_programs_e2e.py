"""§14 end to end with the real compiled llama-server: a role runs a Program, checked at start.

The binary is copied into the test's own directory (the shared testbed is never touched),
pinned with `reconcile programs add`, and the role is started from it; one byte appended
to the copy refuses the next start, and capabilities/status say why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import LLAMA_SERVER, TESTBED, free_port, http_get, wait_for
from tests.e2e.test_once import alive, converge, ready

pytestmark = pytest.mark.e2e


def test_a_role_runs_its_program_and_a_changed_byte_refuses_the_next_start(world):
    """§14: the pinned copy runs (argv[0] in the Program's root, RECONCILER_PROGRAM in its
    environment, its build confirmed: the testbed is compiled with its real build number,
    /props says b11434-…, nothing is said "not confirmed" nor degraded); a byte appended
    to it refuses the next start with both digests and no server."""
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
    (row,) = json.loads(world.reconcile("status", "--json").stdout)["roles"]
    assert (row["program"]["name"], row["program"]["version"]) == ("llama-b11434", "b11434")
    assert os.readlink(f"/proc/{pid}/exe") == str(copy)
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    assert any(e.startswith(b"RECONCILER_PROGRAM=llama-b11434 b11434 sha256:") for e in environ)
    build = json.loads(http_get(port, "/props")[1])["build_info"]
    assert build.startswith("b11434-"), (
        f"the testbed's llama-server reports {build!r}: rebuild it with its build number "
        "(bash testbed/setup.sh)")
    out = converge(world).stdout + world.reconcile("status").stdout
    assert "not confirmed" not in out and "version_mismatch" not in out, out
    assert "degraded" not in out, out

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


#: llama.cpp b10068, the prebuilt wheel's server and its libraries (testbed/demo_server.sh).
PREBUILT = Path(os.environ.get("RECONCILER_PREBUILT", str(TESTBED / "prebuilt" / "llama-server")))


def _pinned(world, files: list[Path], name: str, version: str) -> Path:
    """``files`` (a llama-server and the libraries beside it) copied into the test's own
    directory and pinned as Program ``name`` with `reconcile programs add`."""
    bindir = world.root / name
    bindir.mkdir()
    os.chmod(bindir, 0o755)
    for f in files:
        shutil.copy(f, bindir / f.name)
        os.chmod(bindir / f.name, 0o755)
    out = world.reconcile("programs", "add", str(bindir / "llama-server"), "--version", version,
                          "-o", str(world.manifests / f"{name}.yaml"))
    assert out.returncode == 0, out.stderr
    return bindir / "llama-server"


def test_a_role_switched_to_another_program_restarts_once_and_runs_its_build(world):
    """§14 done-when: the compiled build (b11434) and the prebuilt one (b10068) as two
    Programs; the node switched from one to the other restarts the role exactly once
    (`program b11434 → b10068`), the new server is the prebuilt copy and its /props
    build_info is the prebuilt's; the next pass changes nothing; `status` names it."""
    assert PREBUILT.exists(), (f"no prebuilt llama-server at {PREBUILT}: `make testbed` "
                               "installs it (bash testbed/demo_server.sh --prebuilt)")
    compiled = _pinned(world, [LLAMA_SERVER], "llama-b11434", "b11434")
    prebuilt = _pinned(world, sorted(PREBUILT.parent.iterdir()), "llama-b10068", "b10068")
    port = free_port()
    world.node(program="llama-b11434")
    world.model()
    world.role("chat", port)
    assert world.reconcile("validate").returncode == 0
    converge(world)
    assert ready(port, 30)
    before = world.pid("chat")
    assert os.readlink(f"/proc/{before}/exe") == str(compiled)
    build_before = json.loads(http_get(port, "/props")[1])["build_info"]

    world.node(program="llama-b10068")
    out = converge(world)
    assert out.stdout.count("restart chat") == 1, out.stdout
    assert "spec_changed: program b11434 → b10068" in out.stdout, out.stdout
    assert ready(port, 60)
    after = world.pid("chat")
    assert after != before and not alive(before)
    assert os.readlink(f"/proc/{after}/exe") == str(prebuilt)
    build_after = json.loads(http_get(port, "/props")[1])["build_info"]
    assert build_after != build_before and build_after.startswith("b1-571d0d5"), build_after
    again = converge(world)
    assert "restart" not in again.stdout and world.pid("chat") == after, again.stdout
    # §14 the prebuilt reports a commit and no number (`version: 1 (571d0d5)`): said, not
    # degraded.
    said = wait_for(lambda: (o := world.reconcile("status").stdout) and
                    "not confirmed" in o and o, 20)
    assert said and "program llama-b10068 version b10068 not confirmed" in said, said
    assert "degraded" not in said, said
    table = world.reconcile("status").stdout  # the table names the Program, name@version
    assert "PROGRAM" in table.splitlines()[0] and "llama-b10068@b10068" in table, table


def test_a_program_whose_version_is_not_the_running_build_is_degraded(world):
    """§14 the version check with a real number: the testbed's binary (b11434) pinned as a
    Program that says b11400 starts, is kept (no restart loop) and is `degraded` with the
    reason naming both builds; `status` says it."""
    _pinned(world, [LLAMA_SERVER], "llama-b11400", "b11400")
    port = free_port()
    world.node(program="llama-b11400")
    world.model()
    world.role("chat", port)
    converge(world)
    assert ready(port, 30)
    pid = world.pid("chat")
    out = converge(world).stdout
    assert "version_mismatch" in out, out
    assert ("program llama-b11400 is version b11400, the server reports b11434-" in out), out
    assert world.pid("chat") == pid and "restart" not in out, out
    status = world.reconcile("status").stdout
    assert "degraded" in status and "the server reports b11434-unknown" in status, status
