"""Per-client controls and hostile clients end to end (BEHAVIOUR §9): real daemon, llama-server, ``openai``.

Two API keys and their counters (requests, prompt and completion tokens,
streams included), ``max_concurrency: 1`` under 4 concurrent clients (the
server's own ``/metrics`` never sees more than one request at once), CORS
preflights, and thousands of idle connections up to the cap while a pass
still runs and a normal request is still served.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import signal
import socket
import threading
import time
import urllib.request

import openai
import psutil
import pytest

from tests.e2e.conftest import free_port, http_get, wait_for
from tests.router.test_router_e2e import HI, long_server, server_metric
from tests.watch.test_watch_e2e import value

pytestmark = pytest.mark.e2e


def test_two_keys_are_counted_apart_with_their_tokens(routed):
    """§9 against a real server: two client keys' requests and tokens are counted apart in the
    router's metrics."""
    world, port = routed.world, free_port()
    keys = world.root / "keys"
    keys.write_text("".join(f"{name}:{hashlib.sha256(key.encode()).hexdigest()}\n"
                            for name, key in (("alice", "ka"), ("bob", "kb"))))
    routed.node(router=f", api_keys_file: {keys}")
    world.model()
    world.role("chat", port)
    daemon = routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    alice, bob = routed.client("ka"), routed.client("kb")

    first = alice.chat.completions.create(model="chat", messages=HI, max_tokens=2)
    second = alice.chat.completions.create(model="chat", messages=HI, max_tokens=3)
    chunks = list(bob.chat.completions.create(model="chat", messages=HI, max_tokens=2,
                                              stream=True,
                                              stream_options={"include_usage": True}))
    streamed = next(c.usage for c in reversed(chunks) if c.usage is not None)
    with pytest.raises(openai.AuthenticationError):
        routed.client("kc").chat.completions.create(model="chat", messages=HI, max_tokens=1)

    fams = daemon.metrics()
    assert value(fams, "reconciler_router_client_requests", role="chat", key="alice") == 2
    assert value(fams, "reconciler_router_client_requests", role="chat", key="bob") == 1
    assert value(fams, "reconciler_router_tokens", role="chat", key="alice",
                 kind="completion") == (first.usage.completion_tokens
                                        + second.usage.completion_tokens)
    assert value(fams, "reconciler_router_tokens", role="chat", key="alice",
                 kind="prompt") == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert value(fams, "reconciler_router_tokens", role="chat", key="bob",
                 kind="completion") == streamed.completion_tokens


def test_max_concurrency_1_never_lets_two_requests_reach_the_server(routed):
    """4 concurrent clients, a server that could take 4 at once: it never sees 2 (its own
    /metrics, sampled all along), and every client is answered."""
    world, port = routed.world, free_port()
    routed.node(program=long_server(world))
    world.model()
    world.role("chat", port, extra_args='["--threads", "1", "--parallel", "4"]',
               memory="max_concurrency: 1")
    routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    client = routed.client(timeout=120)
    seen: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(server_metric(port, "requests_processing"))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: client.completions.create(
                model="chat", prompt="hi", max_tokens=2000, extra_body={"ignore_eos": True}),
                range(4)))
    finally:
        done.set()
        sampler.join()
    assert len(answers) == 4 and all(a.usage.completion_tokens >= 1 for a in answers)
    assert max(seen) == 1 and len(seen) >= 10, (max(seen), len(seen))


def test_cors_preflight_from_an_allowed_and_a_refused_origin(routed):
    """§9 against a real daemon: a preflight from a listed ``cors_origins`` entry is allowed, from
    another origin refused."""
    world, port = routed.world, free_port()
    routed.node(router=', cors_origins: ["http://localhost:3000"]')
    world.model()
    world.role("chat", port)
    routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def preflight(origin: str):
        request = urllib.request.Request(
            f"{routed.base_url}/v1/chat/completions", method="OPTIONS",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"})
        try:
            with opener.open(request, timeout=5) as answer:
                return answer.status, answer.headers
        except urllib.error.HTTPError as refused:
            return refused.code, refused.headers

    status, headers = preflight("http://localhost:3000")
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    status, headers = preflight("http://evil.example")
    assert status == 403 and headers["Access-Control-Allow-Origin"] is None
    answer = routed.client(default_headers={"Origin": "http://localhost:3000"}) \
        .chat.completions.with_raw_response.create(model="chat", messages=HI, max_tokens=1)
    assert answer.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_idle_connections_up_to_the_cap_starve_neither_passes_nor_requests(routed):
    """1,999 idle connections under a cap of 2,000: a pass still runs (SIGHUP, seen on the
    metrics endpoint), a request is still served; the 2,001st and beyond get 503; once the
    clients go, the daemon's descriptors are back where they were."""
    world, port = routed.world, free_port()
    routed.node(router=", max_connections: 2000, idle_timeout: 60s")
    world.model()
    world.role("chat", port)
    daemon = routed.start()
    assert wait_for(lambda: http_get(port, "/health")[0] == 200, 20)
    client = routed.client(timeout=30)
    client.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    client.close()
    proc = psutil.Process(daemon.proc.pid)
    time.sleep(5)  # the router's pooled upstream connection goes idle and closes (4 s)
    baseline = proc.num_fds()

    idle = [socket.create_connection(("127.0.0.1", routed.router_port)) for _ in range(1999)]
    try:
        assert wait_for(lambda: proc.num_fds() >= baseline + 1999, 10), proc.num_fds()
        before = value(daemon.metrics(), "reconciler_last_pass_timestamp_seconds")
        os.kill(daemon.proc.pid, signal.SIGHUP)
        assert wait_for(lambda: value(daemon.metrics(), "reconciler_last_pass_timestamp_seconds")
                        > before, 10)
        fresh = routed.client(timeout=30)
        answer = fresh.chat.completions.create(model="chat", messages=HI, max_tokens=1)
        assert answer.usage.completion_tokens == 1
        fresh.close()
        time.sleep(0.5)
        over = [socket.create_connection(("127.0.0.1", routed.router_port)) for _ in range(50)]
        refused = 0
        for s in over:  # the first takes the one place left; the others are over the cap
            s.settimeout(3)
            try:
                refused += s.recv(200).startswith(b"HTTP/1.1 503 ")
            except TimeoutError:
                pass
            s.close()
        assert refused >= 49
    finally:
        for s in idle:
            s.close()
    assert wait_for(lambda: proc.num_fds() <= baseline, 15), (proc.num_fds(), baseline)
    assert "Traceback" not in daemon.log
