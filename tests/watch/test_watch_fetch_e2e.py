"""`reconcile watch` and a Model that arrives by fetch (BEHAVIOUR §1.6): in the background."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from reconciler.models.fetchpolicy import blob_path
from tests.doubles.fileserver import NO_NGINX, NO_NGINX_WHY, Nginx
from tests.e2e.conftest import TINY_GGUF, free_port, http_get, wait_for
from tests.watch.test_watch_e2e import daemons  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)]


def test_watch_fetches_in_the_background_survives_a_kill_and_starts_the_role(
        world, daemons, tmp_path):
    """The daemon's passes show `fetching` with a percentage and the fetch metrics while the
    detached fetch runs; a kill -9 of the daemon leaves the fetch running; the next daemon
    starts the server on the fetched file."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "tiny.gguf").write_bytes(TINY_GGUF.read_bytes())
    nginx = Nginx(www, tmp_path / "nginx", limit_rate="64k")  # 512 KiB: ~8 s
    try:
        cache = world.root / "cache"
        world.node(extra=f"  fetch: {{cache: {cache}, min_free: 1MiB}}")
        world.write("model-tiny.yaml", f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          shards:
            - {{path: tiny.gguf, size: {world.size}, sha256: {world.digest},
               url: "{nginx.url('tiny.gguf')}"}}
        """)
        port = free_port()
        world.role("chat", port)
        first = daemons()

        def progress():
            out = world.reconcile("status", "chat", "--json")
            role = json.loads(out.stdout)["roles"][0] if out.returncode in (0, 3) else {}
            return role if re.match(r"fetching tiny: \d+ %", role.get("detail", "")) else None

        shown = wait_for(progress, 20)
        assert shown and shown["status"] == "fetching", shown
        remaining = first.metrics()["reconciler_fetch_remaining_bytes"].samples
        assert remaining and remaining[0].value > 0
        with world.store() as store:
            (rec,) = store.fetches()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        assert wait_for(lambda: os.path.exists(f"/proc/{rec.pid}"), 1)  # the fetch lives on
        assert wait_for(lambda: os.path.exists(blob_path(str(cache), world.digest)), 30)
        daemons()
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 30)
    finally:
        nginx.close()
