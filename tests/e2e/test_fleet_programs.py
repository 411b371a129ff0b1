"""The fleet from a bare repository (§10) takes a Program by commit (§14), real servers.

Three nodes, each running its own role (one port per server: the nodes share this
machine's loopback) on the testbed's compiled llama-server named by path. One commit
adds a Program for the prebuilt llama.cpp b10068 (pinned in place: its files are only
read) and names it in every NodeConfig's ``serve_programs``; at the next round every
node restarts its role exactly once, onto the pinned build, and ``/props`` says so.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import textwrap

import pytest

from tests.e2e.conftest import LLAMA_SERVER, NOBODY, PORT_RANGE, free_port, http_get
from tests.e2e.test_fleet import NODES, fleet, ok, ready  # noqa: F401 (fleet is a fixture)
from tests.e2e.test_programs_e2e import PREBUILT

pytestmark = pytest.mark.e2e


def nodes_yaml(program: str) -> str:
    return "---\n".join(textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: {name}}}
        spec:
          allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
          serve_programs: {{llamacpp: {program}}}
          run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
          stop_grace: 1s
        """) for name in NODES)


def round_at_once(fleet) -> dict[str, subprocess.CompletedProcess]:
    """One round with the three nodes at the same time, as their timers would run them
    (each role is placed on one node, so no two nodes ever serve one port)."""
    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:
        done = {name: pool.submit(fleet.pull_and_converge, name) for name in NODES}
    return {name: future.result() for name, future in done.items()}


def test_a_commit_pins_a_program_and_every_node_restarts_its_role_once_onto_it(fleet):
    """§14/§10: a commit that moves every node from a path to the pinned Program
    llama-b10068: each node's `--once` restarts its role exactly once (spec_changed,
    naming the old and the new program), its server runs the Program's entrypoint and /props reports the
    prebuilt build; the next round changes nothing anywhere."""
    assert PREBUILT.exists(), (f"no prebuilt llama-server at {PREBUILT}: `make testbed` "
                               "installs it (bash testbed/demo_server.sh --prebuilt)")
    ports = {name: free_port() for name in NODES}
    roles = {f"{name}.yaml": fleet.role_yaml(f"chat-{name[-1]}", ports[name],
                                             f"{{nodes: [{name}]}}") for name in NODES}
    fleet.commit({"nodes.yaml": nodes_yaml(str(LLAMA_SERVER)), "tiny.yaml": fleet.model,
                  **roles}, "three nodes, a role each, on the compiled llama-server by path")
    # the author pins the prebuilt build meanwhile (`programs add` hashes it in place)
    adding = subprocess.Popen([sys.executable, "-m", "reconciler", "programs", "add",
                               str(PREBUILT), "--version", "b10068"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ok(round_at_once(fleet))
    assert all(ready(port) for port in ports.values())
    before = {name: fleet.running(name) for name in NODES}
    builds = {json.loads(http_get(port, "/props")[1])["build_info"] for port in ports.values()}

    program, errors = adding.communicate(timeout=60)
    assert adding.returncode == 0, errors
    fleet.commit({"program-b10068.yaml": program, "nodes.yaml": nodes_yaml("llama-b10068")},
                 "every node serves llama.cpp from the pinned Program llama-b10068")
    results = round_at_once(fleet)
    ok(results)
    for name in NODES:
        role = f"chat-{name[-1]}"
        out = results[name].stdout
        assert out.count("~ restart ") == 1 and out.count(f"{role}: restart done") == 1, \
            f"{name}: {out}"
        # from a path the words are the paths (§14: the record keeps the argv)
        assert (f"~ restart {role} :{ports[name]} (spec_changed: program {LLAMA_SERVER} → "
                f"{PREBUILT})") in out, f"{name}: {out}"
        assert ready(ports[name]), name
        (pid,) = fleet.running(name).values()
        assert pid != before[name][role]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[0] == str(PREBUILT).encode(), name
        build = json.loads(http_get(ports[name], "/props")[1])["build_info"]
        assert build not in builds and build.startswith("b1-571d0d5"), (name, build)
    again = round_at_once(fleet)
    ok(again)
    for name in NODES:
        assert "restart" not in again[name].stdout and "start" not in again[name].stdout, \
            again[name].stdout
