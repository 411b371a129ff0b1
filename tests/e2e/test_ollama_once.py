"""``reconcile --once`` end to end against the Ollama protocol double (BEHAVIOUR §2, §4).

Ollama itself cannot be had offline (design/SERVERS.md), so these tests run the
real command line against ``tests/doubles/ollama.py`` listening on a port in the
world's allowed range. They assert on the double's state (what is resident) and
on its request log (what reached it), never on how our code got there.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.doubles.ollama import OllamaDouble
from tests.e2e.conftest import free_port, wait_for

pytestmark = pytest.mark.e2e

TAG = "llama3.2:3b"
OTHER = "phi3:mini"
READS = {("GET", "/api/version"), ("GET", "/api/tags"), ("GET", "/api/ps")}


def converge(world, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    out = world.reconcile("--once", *args)
    assert out.returncode == expect, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def posts(ollama: OllamaDouble) -> list[tuple[str, str, object]]:
    """Every request that was not one of the three read-only probes."""
    return [r for r in ollama.requests if (r[0], r[1]) not in READS]


def generate(tag: str, keep_alive: int) -> tuple[str, str, dict]:
    body = {"model": tag, "prompt": "", "stream": False, "keep_alive": keep_alive}
    return ("POST", "/api/generate", body)


def client_load(ollama: OllamaDouble, tag: str) -> None:
    """Someone else (not the reconciler) loads ``tag`` and keeps it forever."""
    body = json.dumps({"model": tag, "prompt": "", "stream": False, "keep_alive": -1}).encode()
    request = urllib.request.Request(f"{ollama.url}/api/generate", data=body, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as answer:
        assert answer.status == 200


def status_row(world, name: str) -> dict:
    out = world.reconcile("status", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["roles"][0]


@pytest.fixture
def port():
    return free_port()


def test_managed_role_loads_its_tag_once_then_nothing_to_do(world, port):
    """A managed role sends one POST /api/generate (empty prompt, keep_alive); a second pass none."""
    with OllamaDouble(pulled=[TAG, OTHER], port=port, load_seconds=0.2) as ollama:
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_role("chat", port, model="llama", keep_alive="10m")
        out = converge(world)
        assert f"> load chat :{port} {TAG} (missing)" in out.stdout, out.stdout
        assert ollama.resident() == [TAG]
        assert posts(ollama) == [generate(TAG, 600)]
        assert status_row(world, "chat")["status"] == "running"

        ollama.clear_requests()
        again = converge(world)
        assert "No changes" in again.stdout, again.stdout
        assert ollama.loads == [TAG] and ollama.resident() == [TAG]
        assert posts(ollama) == []
        assert world.reconcile("plan", "--detailed-exitcode").returncode == 0


def test_eviction_reloads_with_backoff_until_gave_up(world, port):
    """A tag evicted behind our back is reloaded after delay(n), counted; then gave-up (exit 3)."""
    with OllamaDouble(pulled=[TAG], port=port) as ollama:
        world.node(restart="{max_restarts: 2, base: 1s, cap: 4s, stable_after: 60s}")
        world.ollama_model("llama", TAG)
        world.ollama_role("chat", port, model="llama")
        converge(world)
        assert ollama.resident() == [TAG]
        for attempt, delay in ((1, 1.0), (2, 2.0)):
            assert ollama.evict(TAG)
            ollama.clear_requests()
            out = converge(world)  # this pass sees the eviction: its backoff starts in it
            seen = time.monotonic()  # (after it: a slow start of `--once` under load does
            # not eat into the wait; from before it, a pass that began 0.4 s late came early)
            assert "wait chat" in out.stdout and "backoff" in out.stdout, out.stdout
            assert ollama.resident() == [] and posts(ollama) == []  # not before the delay
            time.sleep(max(0.0, delay - (time.monotonic() - seen)) + 0.3)
            out = converge(world)
            assert f"> load chat :{port} {TAG} (evicted" in out.stdout, out.stdout
            assert ollama.resident() == [TAG]
            assert posts(ollama) == [generate(TAG, 600)]
            assert world.record("chat").restarts == attempt
            assert status_row(world, "chat")["restarts"] == attempt

        assert ollama.evict(TAG)
        ollama.clear_requests()
        out = converge(world, expect=3)
        assert "give-up chat" in out.stdout and "max_restarts" in out.stdout, out.stdout
        assert world.record("chat").terminal == "gave-up"
        time.sleep(4.3)  # past any delay: a terminal role stays down
        converge(world, expect=3)
        assert ollama.resident() == [] and posts(ollama) == []
        assert ollama.loads == [TAG] * 3
        assert status_row(world, "chat")["status"] == "gave-up"

        started = world.reconcile("start", "chat")
        assert started.returncode == 0, started.stdout + started.stderr
        assert ollama.resident() == [TAG]
        record = world.record("chat")
        assert record.terminal is None and record.restarts == 0


@pytest.mark.parametrize("ending", ["stopped", "removed"])
def test_only_the_tag_we_loaded_is_unloaded(world, port, ending):
    """state: stopped or removal unloads (keep_alive 0) our tag; a tag someone else loaded stays."""
    with OllamaDouble(pulled=[TAG, OTHER], port=port) as ollama:
        client_load(ollama, OTHER)  # resident before the reconciler ever ran
        ollama.clear_requests()
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_model("phi", OTHER)
        world.ollama_role("mine", port, model="llama")
        world.ollama_role("theirs", port, model="phi")
        world.ollama_role("watch", port, model="phi", mode="adopted")  # keeps the set non-empty
        converge(world)
        assert posts(ollama) == [generate(TAG, 600)]  # OTHER was resident: in sync, not loaded
        assert ollama.resident() == sorted([TAG, OTHER])

        ollama.clear_requests()
        if ending == "stopped":
            world.ollama_role("mine", port, model="llama", state="stopped")
            world.ollama_role("theirs", port, model="phi", state="stopped")
        else:
            world.remove("role-mine.yaml")
            world.remove("role-theirs.yaml")
        out = converge(world)
        assert f"< unload mine :{port} {TAG}" in out.stdout, out.stdout
        assert posts(ollama) == [generate(TAG, 0)]
        assert ollama.resident() == [OTHER]

        ollama.clear_requests()
        converge(world)
        converge(world)
        assert posts(ollama) == [] and ollama.resident() == [OTHER]
        if ending == "removed":
            assert world.record("mine") is None and world.record("theirs") is None


def test_a_tag_reloaded_by_a_client_after_our_load_was_evicted_is_not_ours(world, port):
    """Our load seen evicted, the tag loaded again by a client: state: stopped leaves it resident."""
    with OllamaDouble(pulled=[TAG], port=port) as ollama:
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_role("chat", port, model="llama")
        converge(world)
        assert ollama.evict(TAG)
        out = converge(world)
        assert "backoff" in out.stdout, out.stdout  # the pass saw our load go
        client_load(ollama, TAG)
        ollama.clear_requests()
        world.ollama_role("chat", port, model="llama", state="stopped")
        converge(world)
        converge(world)
        assert posts(ollama) == [] and ollama.resident() == [TAG]


def test_a_load_in_flight_is_waited_for_not_doubled(world, port):
    """While a client's load blocks /api/ps the role is loading: no second load, nothing to unload."""
    # The load lasts until the pass has looked (at most 60 s), not a fixed 2 s: a pass on a
    # loaded machine once took longer than that and found the model already in sync.
    with OllamaDouble(pulled=[TAG], port=port, load_seconds=60.0) as ollama:
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_role("chat", port, model="llama")
        loader = threading.Thread(target=client_load, args=(ollama, TAG))
        loader.start()
        try:
            assert wait_for(ollama.loading, 5)
            out = converge(world)
            assert f"= keep chat :{port} (loading" in out.stdout, out.stdout
            assert len(posts(ollama)) == 1  # the client's load only
        finally:
            ollama.finish_loads()
            loader.join(10)
        assert ollama.resident() == [TAG] and ollama.loads == [TAG]
        world.ollama_role("chat", port, model="llama", state="stopped")
        converge(world)
        assert len(posts(ollama)) == 1  # the client's load only
        assert ollama.resident() == [TAG]


def test_unpulled_tag_is_refused_and_never_pulled(world, port):
    """A tag Ollama has not pulled is refused (exit 3); only GETs reach Ollama, pass after pass."""
    with OllamaDouble(pulled=[OTHER], port=port) as ollama:
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_role("chat", port, model="llama")
        for _ in range(2):
            out = converge(world, expect=3)
            assert "refuse chat" in out.stdout and "not_pulled" in out.stdout, out.stdout
        assert status_row(world, "chat")["status"] == "refused"
        assert ollama.requests and posts(ollama) == []
        assert ollama.resident() == [] and ollama.pulled == [OTHER]


def test_adopted_roles_only_ever_receive_gets(world, port):
    """Adopted Ollama roles are observed with GETs only: no load, no unload, whatever happens."""
    with OllamaDouble(pulled=[TAG, OTHER], port=port) as ollama:
        client_load(ollama, OTHER)
        ollama.clear_requests()
        world.node()
        world.ollama_model("llama", TAG)
        world.ollama_model("phi", OTHER)
        world.ollama_role("absent", port, model="llama", mode="adopted")  # pulled, not resident
        world.ollama_role("present", port, model="phi", mode="adopted")
        converge(world)
        assert status_row(world, "present")["status"] == "running"
        for command in (("plan",), ("status",), ("health", "absent"), ("health", "present")):
            world.reconcile(*command)
        assert ollama.evict(OTHER)  # gone behind everyone's back: not ours to reload
        converge(world)
        assert ollama.requests and posts(ollama) == [] and ollama.resident() == []
        client_load(ollama, OTHER)
        ollama.clear_requests()
        world.ollama_role("present", port, model="phi", mode="adopted", state="stopped")
        converge(world)
        world.remove("role-absent.yaml")
        converge(world)
        assert ollama.requests and posts(ollama) == []
        assert ollama.resident() == [OTHER] and ollama.loads == [OTHER, OTHER]
