"""A Model arrives by commit (BEHAVIOUR §1.6): real nginx, real fetch process, real llama-server."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from reconciler.models.fetchpolicy import blob_path, partial_path
from tests.doubles.fileserver import NO_NGINX, NO_NGINX_WHY, FaultServer, Nginx
from tests.e2e.conftest import TINY_GGUF, free_port, http_get, wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)]


def sourced_model(world, url: str, size: int | None = None, digest: str | None = None) -> None:
    world.write("model-tiny.yaml", f"""\
    apiVersion: reconciler/v1
    kind: Model
    metadata: {{name: tiny}}
    spec:
      format: gguf
      shards:
        - {{path: tiny.gguf, size: {size or world.size}, sha256: {digest or world.digest},
           url: "{url}"}}
    """)


def fetch_node(world, *, min_free: str = "1MiB") -> Path:
    cache = world.root / "cache"
    world.node(extra=f"  fetch: {{cache: {cache}, min_free: {min_free}}}")
    return cache


def status(world, name: str) -> dict:
    out = world.reconcile("status", name, "--json")
    data = json.loads(out.stdout)
    return data["roles"][0] if "roles" in data else data


def test_a_role_whose_model_has_a_url_is_fetched_verified_and_started(world, tmp_path):
    """Pass 1 plans the fetch and the role waits `fetching`; the fetch runs detached; a later
    pass starts the server on the verified file from the cache; then nothing to do."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "tiny.gguf").write_bytes(TINY_GGUF.read_bytes())
    nginx = Nginx(www, tmp_path / "nginx", limit_rate="128k")
    try:
        cache = fetch_node(world)
        sourced_model(world, nginx.url("tiny.gguf"))
        port = free_port()
        world.role("chat", port)
        plan = world.reconcile("plan")
        assert "> fetch tiny 524.6 kB (missing on this node;" in plan.stdout, plan.stdout
        assert "… wait chat" in plan.stdout and "fetching" in plan.stdout
        assert plan.stdout.rstrip().endswith("Plan: 1 to fetch; 1 unchanged.")
        assert world.reconcile("plan", "--detailed-exitcode").returncode == 2
        first = world.reconcile("--once")
        assert first.returncode == 0, first.stdout + first.stderr
        shown = status(world, "chat")
        assert shown["status"] == "fetching", shown
        assert shown["detail"].startswith("fetching tiny:")
        blob = Path(blob_path(str(cache), world.digest))
        assert wait_for(blob.exists, timeout=30), "the fetch never finished"
        assert not Path(partial_path(str(cache), world.digest)).exists()
        out = world.reconcile("--once")
        assert out.returncode == 0, out.stdout + out.stderr
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
        again = world.reconcile("plan")
        assert "No changes" in again.stdout and "fetch" not in again.stdout, again.stdout
    finally:
        nginx.close()


def test_wrong_bytes_refuse_the_role_with_both_digests_until_retry(world, tmp_path):
    """The server's bytes are not the Model's: refused, both digests named, nothing served;
    `reconcile models fetch --retry` (now with the right bytes) lets the next pass start it."""
    server = FaultServer()
    try:
        server.files["tiny.gguf"] = TINY_GGUF.read_bytes()
        server.faults["tiny.gguf"] = {"wrong": True}
        cache = fetch_node(world)
        sourced_model(world, server.url("tiny.gguf"))
        port = free_port()
        world.role("chat", port)
        world.reconcile("--once")
        result = cache / "jobs" / "tiny.result.json"
        assert wait_for(result.exists, timeout=30)
        out = world.reconcile("--once")
        assert out.returncode == 3, out.stdout + out.stderr
        shown = status(world, "chat")
        assert shown["status"] == "refused" and world.digest in shown["detail"], shown
        assert "sha256 mismatch" in shown["detail"] and "--retry" in shown["detail"]
        assert not Path(blob_path(str(cache), world.digest)).exists()
        server.faults["tiny.gguf"] = {}
        fetched = world.reconcile("models", "fetch", "--retry", "tiny")
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        out = world.reconcile("--once")
        assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20), out.stdout
    finally:
        server.close()


def test_a_killed_fetch_is_resumed_by_the_next_pass(world, tmp_path):
    """kill -9 of the detached fetch mid-file: the next pass starts another that resumes
    with a Range (only the rest is sent, give or take one chunk)."""
    from reconciler.models.fetch import CHUNK

    server = FaultServer()
    try:
        data = os.urandom(8 * CHUNK)  # only fetched here, never served
        digest = hashlib.sha256(data).hexdigest()
        server.files["tiny.gguf"] = data
        server.faults["tiny.gguf"] = {"delay": 0.03}  # 64 KiB every 30 ms: ~4 s in all
        cache = fetch_node(world)
        sourced_model(world, server.url("tiny.gguf"), len(data), digest)
        world.role("chat", free_port())
        world.reconcile("--once")
        with world.store() as store:
            (rec,) = store.fetches()
        part = Path(partial_path(str(cache), digest))
        assert wait_for(lambda: part.exists() and part.stat().st_size >= len(data) // 3, 20)
        os.kill(rec.pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{rec.pid}").exists(), 5)
        had = part.stat().st_size
        server.faults["tiny.gguf"] = {}
        sent = server.sent
        world.reconcile("--once")
        assert wait_for(Path(blob_path(str(cache), digest)).exists, 30)
        assert server.sent - sent - (len(data) - had) <= CHUNK
        ranges = [h.get("Range") for m, _, h in server.requests if m == "GET"]
        assert ranges[-1] == f"bytes={had}-", ranges
    finally:
        server.close()


def test_not_enough_disk_refuses_with_the_reason(world):
    """The missing bytes plus min_free exceed what is free: refused, nothing fetched."""
    fetch_node(world, min_free="4TiB")
    sourced_model(world, "http://127.0.0.1:9/tiny.gguf")
    world.role("chat", free_port())
    out = world.reconcile("--once")
    assert out.returncode == 3
    shown = status(world, "chat")
    assert shown["status"] == "refused" and "not enough disk to fetch tiny" in shown["detail"]
    assert not (world.root / "cache" / "jobs").exists()


def test_a_node_without_fetch_says_the_model_has_a_source(world):
    """No spec.fetch: refused, and the message says why (the Model has a source)."""
    world.node()
    sourced_model(world, "http://127.0.0.1:9/tiny.gguf")
    world.role("chat", free_port())
    out = world.reconcile("--once")
    assert out.returncode == 3
    detail = status(world, "chat")["detail"]
    assert "has a source" in detail and "does not fetch" in detail, detail


@pytest.mark.parametrize("point", ["fetch-intent", "fetch-spawned"])
def test_once_killed_around_the_fetch_spawn_is_finished_by_the_next_pass(world, tmp_path, point):
    """kill -9 of `--once` right after the fetch's intent, or right after its spawn (pid not
    recorded): the fetch process (own session) lives on or a new one starts; the server starts."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "tiny.gguf").write_bytes(TINY_GGUF.read_bytes())
    nginx = Nginx(www, tmp_path / "nginx")
    try:
        cache = fetch_node(world)
        sourced_model(world, nginx.url("tiny.gguf"))
        port = free_port()
        world.role("chat", port)
        killed = world.reconcile("--once", env={"RECONCILER_FAILPOINT": point})
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        with world.store() as store:
            (rec,) = store.fetches()
        assert rec.pid is None  # the intent: written first
        blob = Path(blob_path(str(cache), world.digest))
        if point == "fetch-spawned":
            assert wait_for(blob.exists, 30), "the orphaned fetch process did not finish"
        for _ in range(10):
            world.reconcile("--once")
            if wait_for(lambda: http_get(port, "/health")[0] == 200, 3):
                break
        assert http_get(port, "/health")[0] == 200
        assert blob.exists()
    finally:
        nginx.close()


def test_a_hub_model_at_a_commit_is_fetched_through_the_cdn_and_started(world, tmp_path):
    """source {hf, revision}: the fetch asks the Hub double (hf_endpoint), follows its
    redirect to the CDN host, sends the token to the Hub only, and the server starts."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    hub_server, cdn = FaultServer(), FaultServer(host="127.0.0.2")
    try:
        hub_server.hub["org/tiny"] = (commit, cdn.base)
        hub_server.files["tiny.gguf"] = cdn.files["tiny.gguf"] = TINY_GGUF.read_bytes()
        token = world.root / "hf-token"
        token.write_text("hf_secret\n")
        cache = world.root / "cache"
        world.node(extra=f"  fetch: {{cache: {cache}, min_free: 1MiB, "
                         f"hf_endpoint: '{hub_server.base}', hf_token_file: {token}}}")
        world.write("model-tiny.yaml", f"""\
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          source: {{hf: org/tiny, revision: {commit}}}
          shards:
            - {{path: tiny.gguf, size: {world.size}, sha256: {world.digest}}}
        """)
        port = free_port()
        world.role("chat", port)
        world.reconcile("--once")
        assert wait_for(Path(blob_path(str(cache), world.digest)).exists, 30)
        for _ in range(5):
            world.reconcile("--once")
            if wait_for(lambda: http_get(port, "/health")[0] == 200, 5):
                break
        assert http_get(port, "/health")[0] == 200
        gets = [(p, h) for m, p, h in hub_server.requests if m == "GET"]
        assert gets and gets[0][0] == f"/org/tiny/resolve/{commit}/tiny.gguf"
        assert gets[0][1].get("Authorization") == "Bearer hf_secret"
        assert cdn.requests and all("Authorization" not in h for _, _, h in cdn.requests)
        log = (cache / "jobs" / "tiny.log").read_text()
        assert "hf_secret" not in log
    finally:
        hub_server.close()
        cdn.close()
