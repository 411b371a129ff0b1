"""The fleet from a bare repository (§10) meets Model sources (§1.6): a commit adds a Model
with a source and places roles on two nodes; both fetch and start, the third fetches nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from reconciler.models.fetchpolicy import blob_path
from tests.doubles.fileserver import NO_NGINX, NO_NGINX_WHY, Nginx
from tests.e2e.conftest import LLAMA_SERVER, NOBODY, PORT_RANGE, TINY_GGUF, free_port, wait_for
from tests.e2e.test_fleet import NODES, fleet, ok, ready  # noqa: F401 (fleet is a fixture)

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)]


def test_a_commit_with_a_sourced_model_fetches_on_two_nodes_and_not_the_third(fleet, tmp_path):
    """§1.6/§10 a commit with a sourced Model: ``fleet`` shows the fetches per node; the two nodes
    that need it fetch and serve, the third fetches nothing."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "tiny.gguf").write_bytes(TINY_GGUF.read_bytes())
    nginx = Nginx(www, tmp_path / "nginx")
    try:
        digest = hashlib.sha256(TINY_GGUF.read_bytes()).hexdigest()
        nodes = "---\n".join(textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: NodeConfig
            metadata: {{name: {name}, labels: {json.dumps({"gpu": "yes" if name != "node-c" else "no"})}}}
            spec:
              allowed_ports: {{from: {PORT_RANGE[0]}, to: {PORT_RANGE[1]}}}
              serve_programs: {{llamacpp: {LLAMA_SERVER}}}
              run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
              stop_grace: 1s
              fetch: {{cache: {fleet.root / name / "cache"}, min_free: 1MiB}}
            """) for name in NODES)
        model = textwrap.dedent(f"""\
            apiVersion: reconciler/v1
            kind: Model
            metadata: {{name: tiny}}
            spec:
              format: gguf
              shards:
                - {{path: tiny.gguf, size: {TINY_GGUF.stat().st_size}, sha256: {digest},
                   url: "{nginx.url('tiny.gguf')}"}}
            """)
        pa, pb = free_port(), free_port()
        fleet.commit({"nodes.yaml": nodes}, "three nodes")
        ok(fleet.round())
        fleet.commit({"tiny.yaml": model,
                      "a.yaml": fleet.role_yaml("coder-a", pa, "{nodes: [node-a]}"),
                      "b.yaml": fleet.role_yaml("coder-b", pb, "{nodes: [node-b]}")},
                     "a Model by url, a role on node-a and one on node-b")
        view = subprocess.run([sys.executable, "-m", "reconciler", "fleet", "--json",
                               "-f", str(fleet.author / "manifests")],
                              capture_output=True, text=True, timeout=60)
        shown = {n["node"]: n["fetches"] for n in json.loads(view.stdout)["nodes"]}
        size = TINY_GGUF.stat().st_size
        assert shown == {"node-a": [{"model": "tiny", "bytes": size}],
                         "node-b": [{"model": "tiny", "bytes": size}], "node-c": []}
        ok(fleet.round())  # the fetches start, detached
        for name in ("node-a", "node-b"):
            assert wait_for(lambda: os.path.exists(blob_path(str(fleet.root / name / "cache"),
                                                             digest)), 30), name
        for _ in range(4):
            ok(fleet.round())
            if ready(pa) and ready(pb):
                break
        assert ready(pa) and ready(pb)
        assert set(fleet.running("node-a")) == {"coder-a"}
        assert set(fleet.running("node-b")) == {"coder-b"}
        assert fleet.running("node-c") == {}
        assert not (fleet.root / "node-c" / "cache").exists()  # node-c fetched nothing
    finally:
        nginx.close()
