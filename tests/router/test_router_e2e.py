"""The router end to end (BEHAVIOUR §9): real ``reconcile watch``, real llama.cpp servers, ``openai``.

Every test starts the real daemon on a world whose NodeConfig has a router,
and talks to it with the official ``openai`` client (or plain HTTP where the
client cannot say it: a disconnect, Ollama's own API). Assertions are on what
the client got, on the servers themselves (their pids, their own
``/metrics``), on the store's events and on the daemon's Prometheus
endpoint, never on how the router got there.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import stat
import threading
import time
import urllib.request

import openai
import psutil
import pytest

from tests.e2e.conftest import LLAMA_SERVER, free_port, http_get, wait_for
from tests.watch.test_watch_e2e import alive, events, value

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "hi"}]


def kinds(world, role: str, kind: str) -> list:
    return [e for e in events(world, role) if e.kind == kind]


def stopped(world, role: str) -> bool:
    record = world.record(role)
    return record is not None and record.pid is None


def long_server(world) -> str:
    """llama-server with ``--context-shift``: a tiny model generates for seconds, not 0.1 s."""
    path = world.root / "llama-server-long"
    path.write_text(f"#!/bin/sh\nexec {LLAMA_SERVER} \"$@\" --context-shift --metrics\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def count(fams: dict, family: str, role: str) -> float:
    """A histogram's ``_count`` for ``role``."""
    return next(s.value for s in fams[family].samples
                if s.name == f"{family}_count" and s.labels == {"node": "test-node", "role": role})


def server_metric(port: int, name: str) -> float:
    status, body = http_get(port, "/metrics")
    assert status == 200, status
    line = next(x for x in body.decode().splitlines() if x.startswith(f"llamacpp:{name} "))
    return float(line.split()[1])


def test_openai_client_cold_starts_an_on_demand_role_and_chats(routed):
    """First request starts the role; chat and streaming answered; /v1/models; unknown → 404."""
    world, port = routed.world, free_port()
    routed.node()
    world.model()
    world.role("chat", port, state="on-demand")
    daemon = routed.start()
    assert world.pid("chat") is None and http_get(port, "/health")[0] == 0
    client = routed.client()

    answer = client.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    assert answer.usage.completion_tokens == 1 and answer.choices[0].finish_reason == "length"
    assert alive(world.pid("chat"))
    # The answer may come before the pass that started the role has recorded it (§9: the
    # router releases the waiters the moment the new server answers).
    assert wait_for(lambda: kinds(world, "chat", "start"), 5)
    [start] = kinds(world, "chat", "start")
    assert (start.reason, start.ok) == ("demand", True)

    chunks = list(client.chat.completions.create(model="tiny", messages=HI, max_tokens=4,
                                                 stream=True))
    assert len(chunks) >= 4 and chunks[-1].choices[0].finish_reason == "length"
    text = client.completions.create(model="chat", prompt="hi", max_tokens=1)
    assert text.usage.completion_tokens == 1

    listed = {m.id: m for m in client.models.list().data}
    assert list(listed) == ["chat"] and listed["chat"].status == "running"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-9", messages=HI, max_tokens=1)
    assert missing.value.body["type"] == "invalid_request_error"
    assert "gpt-9" in missing.value.body["message"]
    assert len(kinds(world, "chat", "start")) == 1

    fams = daemon.metrics()
    assert value(fams, "reconciler_router_requests", role="chat", code="200") == 3
    assert value(fams, "reconciler_router_cold_starts", role="chat") == 1
    assert count(fams, "reconciler_router_time_to_first_byte_seconds", "chat") == 3
    assert count(fams, "reconciler_router_queue_wait_seconds", "chat") == 1
    assert value(fams, "reconciler_router_in_flight", role="chat") == 0
    assert daemon.stop() == 0


def test_idle_role_is_stopped_and_the_next_request_starts_it_again(routed):
    """idle_after with no request stops the role (reason idle); the next request restarts it."""
    world, port = routed.world, free_port()
    routed.node()
    world.model()
    world.role("chat", port, state="on-demand", memory="idle_after: 1s")
    routed.start()
    client = routed.client()
    client.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    first = world.pid("chat")
    assert alive(first)

    assert wait_for(lambda: stopped(world, "chat"), 10), routed.daemon.log
    [stop] = kinds(world, "chat", "stop")
    assert stop.reason == "idle" and not alive(first)
    # §9 /v1/models says what the pass did (stopped), not what it found (running).
    assert wait_for(lambda: [m.status for m in client.models.list().data] == ["stopped"], 2)

    again = client.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    assert again.usage.completion_tokens == 1
    assert wait_for(lambda: [e.reason for e in kinds(world, "chat", "start")]
                    == ["demand", "demand"], 5)


def test_two_roles_that_do_not_fit_together_swap_on_alternating_requests(routed):
    """Each request evicts the other idle role; all answered; never both held or running."""
    world = routed.world
    ports = {"coder": free_port(), "chat": free_port()}
    routed.node(budget="1MB")
    world.model()
    for name, port in ports.items():
        world.role(name, port, state="on-demand", memory="memory: {weights: 600kB, kv: 0}")
    daemon = routed.start()
    client = routed.client()

    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with world.store() as store:
                held = sum(r.reserved for r in store.roles())
            running = sum(alive(world.pid(n)) for n in ports)
            samples.append((held, running))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for name in ["coder", "chat"] * 2:  # 3 swaps: each role evicted, coder twice
            answer = client.chat.completions.create(model=name, messages=HI, max_tokens=1)
            assert answer.usage.completion_tokens == 1
            assert alive(world.pid(name))
    finally:
        done.set()
        sampler.join()
    assert samples and max(held for held, _ in samples) <= 10**6, max(samples)
    assert max(running for _, running in samples) <= 1
    assert wait_for(lambda: sum(len(kinds(world, n, "stop")) for n in ports) == 3, 5)
    evicted = [(e.role, e.detail) for n in ports for e in kinds(world, n, "stop")]
    assert len(evicted) == 3, evicted
    assert all(e.reason == "evicted" for n in ports for e in kinds(world, n, "stop"))
    fams = daemon.metrics()
    assert value(fams, "reconciler_router_evictions", role="coder") == 2
    assert value(fams, "reconciler_router_evictions", role="chat") == 1
    assert value(fams, "reconciler_router_cold_starts", role="chat") == 2


def test_32_concurrent_requests_at_a_cold_role_start_it_once(routed):
    """32 requests at once for a stopped on-demand role: one start, 32 answers."""
    world, port = routed.world, free_port()
    routed.node()
    world.model()
    world.role("chat", port, state="on-demand", extra_args='["--threads", "1", "--parallel", "4"]')
    routed.start()
    client = routed.client(timeout=60)

    def ask(_):
        return client.chat.completions.create(model="chat", messages=HI, max_tokens=1)

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, range(32)))
    assert [a.usage.completion_tokens for a in answers] == [1] * 32
    assert wait_for(lambda: kinds(world, "chat", "start"), 5)
    assert len(kinds(world, "chat", "start")) == 1


def test_a_client_that_disconnects_mid_stream_cancels_its_generation(routed):
    """The server stops generating when the client goes (its own /metrics); it stays healthy."""
    world, port = routed.world, free_port()
    routed.node(program=long_server(world))
    world.model()
    world.role("chat", port)
    routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    pid = world.pid("chat")

    body = json.dumps({"model": "chat", "prompt": "hi", "max_tokens": 50000,
                       "stream": True}).encode()
    request = urllib.request.Request(f"{routed.base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    answer = opener.open(request, timeout=10)
    assert answer.status == 200 and answer.readline().startswith(b"data: ")
    assert server_metric(port, "requests_processing") == 1
    answer.close()  # the client goes, mid-stream

    assert wait_for(lambda: server_metric(port, "requests_processing") == 0, 3)
    produced = server_metric(port, "tokens_predicted_total")
    time.sleep(0.5)
    assert server_metric(port, "tokens_predicted_total") == produced < 50000
    quick = routed.client().completions.create(model="chat", prompt="hi", max_tokens=1)
    assert quick.usage.completion_tokens == 1 and world.pid("chat") == pid


def test_kill_9_mid_request_is_502_and_the_next_waits_for_the_restart(routed):
    """kill -9 during a request → 502; meanwhile a full queue → 429; the next one is served."""
    world, port = routed.world, free_port()
    routed.node(router=", max_queue: 1", program=long_server(world),
                restart="{max_restarts: 3, base: 2s, cap: 8s, stable_after: 60s}")
    world.model()
    world.role("chat", port)
    daemon = routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    pid = world.pid("chat")
    client = routed.client(timeout=30)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        long = pool.submit(client.completions.create, model="chat", prompt="hi",
                           max_tokens=50000)
        assert wait_for(lambda: server_metric(port, "requests_processing") == 1, 5)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(openai.InternalServerError) as failed:
            long.result(10)
        assert failed.value.status_code == 502 and failed.value.body["type"] == "api_error"

        assert wait_for(lambda: kinds(world, "chat", "wait"), 5), daemon.log  # in backoff
        waiting = pool.submit(client.completions.create, model="chat", prompt="hi",
                              max_tokens=1)
        assert wait_for(lambda: value(daemon.metrics(), "reconciler_router_queued",
                                      role="chat") == 1, 5)
        with pytest.raises(openai.RateLimitError) as full:
            client.completions.create(model="chat", prompt="hi", max_tokens=1)
        assert full.value.response.headers["Retry-After"] == "1"
        served = waiting.result(20)
    assert served.usage.completion_tokens == 1
    assert world.pid("chat") not in (None, pid)
    assert wait_for(lambda: kinds(world, "chat", "restart"), 5)
    restart = kinds(world, "chat", "restart")
    assert restart and restart[0].ok


def test_bad_key_is_401_and_an_oversized_body_413(routed):
    """With api_key_file a wrong key gets 401; a body over max_body gets 413; the right key works."""
    world, port = routed.world, free_port()
    key = world.root / "router.key"
    key.write_text("s3cret\n")
    routed.node(router=f", max_body: 2KiB, api_key_file: {key}")
    world.model()
    world.role("chat", port)
    routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)

    with pytest.raises(openai.AuthenticationError):
        routed.client("wrong").chat.completions.create(model="chat", messages=HI, max_tokens=1)
    good = routed.client("s3cret")
    with pytest.raises(openai.APIStatusError) as big:
        good.chat.completions.create(model="chat", max_tokens=1,
                                     messages=[{"role": "user", "content": "x" * 4096}])
    assert big.value.status_code == 413 and "max_body" in big.value.body["message"]
    answer = good.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    assert answer.usage.completion_tokens == 1


def test_an_ollama_role_is_reached_through_ollamas_own_api(routed):
    """/api/chat for an Ollama role goes to its server with the tag and the role's keep_alive."""
    from tests.doubles.ollama import OllamaDouble

    world = routed.world
    with OllamaDouble(port=free_port()) as ollama:
        ollama.add_pulled("llama3.2:3b")
        routed.node()
        world.ollama_model("llama", "llama3.2:3b")
        world.ollama_role("assistant", ollama.port, model="llama", keep_alive="10m")
        routed.start()
        assert wait_for(lambda: ollama.resident() == ["llama3.2:3b"], 10)
        body = json.dumps({"model": "assistant", "stream": False,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(f"{routed.base_url}/api/chat", data=body)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as answer:
            assert answer.status == 200 and json.loads(answer.read())["done"] is True
        got = [r for r in ollama.requests if r[1] == "/api/chat"]
        assert got[-1][2]["model"] == "llama3.2:3b" and got[-1][2]["keep_alive"] == 600
