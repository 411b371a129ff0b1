"""http.client and tqdm are loaded only when something is downloaded (BEHAVIOUR §1.6).

A pass never downloads: it spawns a detached fetch process. So a plain
``--once`` — on a node without ``fetch``, or with a Model still to fetch —
leaves ``http.client``, ``tqdm`` and ``reconciler.models.fetch`` unloaded (``ssl`` is
loaded by asyncio anyway).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = """
import sys
from reconciler import cli
code = cli.main(["-f", sys.argv[1], "--state-dir", sys.argv[2], *sys.argv[3:]])
print(code, sorted(m for m in ("http.client", "tqdm", "reconciler.models.fetch")
                   if m in sys.modules))
"""

MODEL = """\
apiVersion: reconciler/v1
kind: Model
metadata: {name: tiny}
spec:
  format: gguf
  shards:
    - {path: tiny.gguf, size: 1000, sha256: %s, url: "http://127.0.0.1:9/tiny.gguf"}
---
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {name: chat}
spec: {runtime: llamacpp, mode: managed, model: tiny, state: %s, serve: {port: 18999}}
---
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {name: n}
spec:
  serve_programs: {llamacpp: /bin/true}
  %s
"""


@pytest.mark.parametrize("state,fetch", [("stopped", ""), ("stopped", "fetch: {cache: CACHE}"),
                                         ("running", "fetch: {cache: CACHE, min_free: 1}")])
def test_a_pass_never_imports_the_downloader(tmp_path: Path, state: str, fetch: str) -> None:
    """--once with nothing to fetch, and --once that starts a fetch: no downloader loaded."""
    manifests = tmp_path / "m"
    manifests.mkdir()
    text = MODEL % ("a" * 64, state, fetch.replace("CACHE", str(tmp_path / "cache")))
    (manifests / "all.yaml").write_text(textwrap.dedent(text))
    out = subprocess.run([sys.executable, "-c", PROBE, str(manifests), str(tmp_path / "s"),
                          "--once"], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines()[-1].endswith(" []"), out.stdout + out.stderr
    if state == "running":  # the fetch was planned and its process spawned
        assert (tmp_path / "cache" / "jobs" / "tiny.json").exists(), out.stdout + out.stderr
        from reconciler.state.store import Store

        with Store(tmp_path / "s") as store:
            (rec,) = store.fetches()
        try:  # ours: it would retry a closed port for a few seconds more
            os.kill(rec.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
