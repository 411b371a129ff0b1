"""A group of three real llama-servers behind the router (BEHAVIOUR §9.1), with ``openai``.

The test starts three llama-server processes of the testbed's tiny model itself (``--parallel
2``, ``--metrics``), on three loopback ports, and a real ``Proxy`` in a thread of its own with
a table of one group over them (as a pass would publish it; the daemon's side of replicas is
not this test's). The official ``openai`` client sends through the router; what is asserted
is what the clients got and what each server says it served (its own ``/metrics``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import threading
import time

import openai
import pytest

from reconciler.core.desired import RouterConfig
from reconciler.router.proxy import Proxy
from reconciler.router.queues import Book
from reconciler.router.rules import Route, RouteState, Table
from tests.e2e.conftest import LLAMA_SERVER, TINY_GGUF, free_port, http_get, wait_for
from tests.router.test_router_e2e import server_metric

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "hi"}]


class Rig:
    """Three llama-servers, and a router over them on its own loop."""

    def __init__(self, tmp_path) -> None:
        self.ports = [free_port() for _ in range(3)]
        self.servers = [subprocess.Popen(
            [str(LLAMA_SERVER), "--model", str(TINY_GGUF), "--host", "127.0.0.1", "--port",
             str(p), "--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--metrics"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True) for p in self.ports]
        self.loop = asyncio.new_event_loop()
        self.book = Book(lambda: None)
        self.proxy = Proxy(RouterConfig(host="127.0.0.1", port=0), self.book)
        self.url = ""
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coroutine_or_fn):
        if asyncio.iscoroutine(coroutine_or_fn):
            return asyncio.run_coroutine_threadsafe(coroutine_or_fn, self.loop).result(30)
        done = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(lambda: done.set_result(coroutine_or_fn()))
        return done.result(30)

    def start(self) -> None:
        for p in self.ports:
            assert wait_for(lambda p=p: http_get(p, "/health")[0] == 200, 60), p
        host, port = self.call(self.proxy.start())
        self.url = f"http://{host}:{port}/v1"
        routes = tuple(Route(role="chat" if i == 0 else f"chat/{i}",
                             names=("chat" if i == 0 else f"chat/{i}", "chat", "tiny"),
                             host="127.0.0.1", port=p, state=RouteState.READY,
                             status="running", group="chat", replica=i)
                       for i, p in enumerate(self.ports))

        def publish():
            self.proxy.table = self.proxy.known_ready(Table(routes=routes))
            self.book.publish(self.proxy.table, 0)
        self.call(publish)
        assert wait_for(lambda: all(self.proxy._slots.get(r.role) == 2  # noqa: SLF001
                                    for r in routes), 10), self.proxy._slots  # noqa: SLF001

    def close(self) -> None:
        try:
            self.call(self.proxy.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            for s in self.servers:
                if s.poll() is None:
                    s.kill()
                s.wait(10)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=60)


@pytest.fixture
def rig(tmp_path):
    rig = Rig(tmp_path)
    try:
        rig.start()
        yield rig
    finally:
        rig.close()


def ask(client: openai.OpenAI, tokens: int) -> str:
    answer = client.chat.completions.create(model="chat", messages=HI, max_tokens=tokens)
    return answer.choices[0].finish_reason


def test_openai_clients_are_spread_over_the_three_servers(rig) -> None:
    """§9.1 requests for the group, from the ``openai`` client, reach every instance (each
    server counts the tokens it predicted), and all are answered."""
    client = rig.client()
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        reasons = list(pool.map(lambda _: ask(client, 8), range(18)))
    assert len(reasons) == 18
    assert all(server_metric(p, "tokens_predicted_total") > 0 for p in rig.ports)


def test_a_kill_9_of_one_server_under_load_fails_only_what_was_in_flight_on_it(rig) -> None:
    """§9.1 kill -9 of one instance while 6 clients ask: the requests that fail are at most
    those it was serving; every request after the kill is answered by the others."""
    client = rig.client()
    stop = time.monotonic() + 6.0
    failures: list[str] = []
    answered = [0]
    lock = threading.Lock()

    def loop() -> None:
        while time.monotonic() < stop:
            try:
                ask(client, 16)
                with lock:
                    answered[0] += 1
            except openai.APIError as exc:
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=loop) for _ in range(6)]
    for w in workers:
        w.start()
    time.sleep(2.0)
    victim = rig.servers[1]
    os.killpg(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    for w in workers:
        w.join(30)
    assert victim.wait(5) == -signal.SIGKILL
    assert len(failures) <= 2, failures  # its two slots: the most it could be serving
    assert all("chat/1" in f or "failed" in f for f in failures), failures
    removed = rig.proxy._out.get("chat/1")  # noqa: SLF001
    assert removed is not None and removed - killed < 0.5
    assert answered[0] > 0
