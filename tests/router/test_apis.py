"""§9 Anthropic's Messages API and OpenAI's Responses API through the router, in one process.

``/v1/messages``, ``/v1/messages/count_tokens`` and ``/v1/responses`` go
through the same ``Proxy`` as chat completions: found by ``model``, the
client's key checked (``Authorization: Bearer`` or Anthropic's ``X-Api-Key``)
and never forwarded, queued behind ``max_concurrency``, waiting for a role
that is not ready, counted with their token usage; every error the router
answers itself on Anthropic's paths is in Anthropic's shape. The role's
server is a small aiohttp application answering as llama-server does (its
SSE events as llama-server writes them).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading

from aiohttp import web
from prometheus_client import CollectorRegistry

from reconciler.report.metrics import RouterMetrics
from reconciler.router import clients
from reconciler.router.rules import RouteState
from tests.support import proxyrig
from tests.support.proxyrig import AppUpstream
from tests.support.proxyrig import route as _route

#: An Anthropic stream as llama-server writes it: the input tokens in ``message_start``,
#: the output tokens in ``message_delta``.
MESSAGES_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
    b'"role":"assistant","content":[],"model":"served","stop_reason":null,"stop_sequence":null,'
    b'"usage":{"cache_read_input_tokens":20,"input_tokens":17,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens",'
    b'"stop_sequence":null},"usage":{"output_tokens":5}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n')

RESPONSES_STREAM = (
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"r",'
    b'"status":"in_progress","usage":null}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r",'
    b'"status":"completed","usage":{"input_tokens":54,"output_tokens":6,"total_tokens":60,'
    b'"input_tokens_details":{"cached_tokens":53}}}}\n\n')


class ApiUpstream(AppUpstream):
    """The role's server: Anthropic's and the Responses API's answers, recorded requests."""

    paths = ("/v1/messages", "/v1/messages/count_tokens", "/v1/responses")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict, dict]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((request.path, body, dict(request.headers)))
        if request.path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": 54})
        events = MESSAGES_STREAM if request.path == "/v1/messages" else RESPONSES_STREAM
        if not body.get("stream"):
            usage = ({"input_tokens": 1, "cache_read_input_tokens": 53, "output_tokens": 5}
                     if request.path == "/v1/messages" else
                     {"input_tokens": 54, "output_tokens": 5, "total_tokens": 59})
            return web.json_response({"model": body.get("model"), "usage": usage})
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        pieces = [event + b"\n\n" for event in events.split(b"\n\n") if event]
        for i, piece in enumerate(pieces):  # one event a write, as llama-server sends them
            if i == len(pieces) // 2 and body.get("hold"):
                await self.go_on.wait()
            await answer.write(piece)
            await asyncio.sleep(0.005)
        await answer.write_eof()
        return answer


def run(test, *, key: str | None = None, **config) -> None:
    """Run ``test(rig, session)`` with a started proxy and an Anthropic-speaking upstream."""
    proxyrig.run(test, ApiUpstream, key=key, **config)


HI = {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def _anthropic(raw: bytes) -> tuple[str, str]:
    """(type, message) of an Anthropic-shaped error; fails on any other shape."""
    body = json.loads(raw)
    assert body["type"] == "error" and set(body) == {"type", "error"}, body
    return body["error"]["type"], body["error"]["message"]


def test_each_route_is_forwarded_by_model_renamed_and_streams_pass_unchanged() -> None:
    """§9 ``/v1/messages`` (plain and streamed), ``/v1/messages/count_tokens`` and ``/v1/responses``
    go to the role a ``model`` names, with the server's own model name; a stream's bytes (its
    ``event:`` lines) reach the client exactly as the server wrote them."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, _, raw = await rig.post(s, {"model": "qwen", **HI}, path="/v1/messages")
        assert status == 200 and json.loads(raw)["model"] == "served"
        status, _, raw = await rig.post(s, {"model": "qwen", **HI, "stream": True},
                                        path="/v1/messages")
        assert status == 200 and raw == MESSAGES_STREAM
        status, _, raw = await rig.post(s, {"model": "chat", **HI},
                                        path="/v1/messages/count_tokens")
        assert (status, json.loads(raw)) == (200, {"input_tokens": 54})
        status, _, raw = await rig.post(s, {"model": "chat", "input": "hi", "stream": True},
                                        path="/v1/responses")
        assert status == 200 and raw == RESPONSES_STREAM
        assert [(p, b["model"]) for p, b, _ in rig.upstream.seen] == [
            ("/v1/messages", "served"), ("/v1/messages", "served"),
            ("/v1/messages/count_tokens", "served"), ("/v1/responses", "served")]
    run(test)


def test_errors_on_anthropics_paths_are_in_its_shape_and_openais_elsewhere() -> None:
    """§9 an unknown model is 404 ``not_found_error`` on ``/v1/messages`` (and count_tokens), a body
    without ``model`` 400 ``invalid_request_error``, a GET 405, all Anthropic-shaped;
    ``/v1/responses`` answers OpenAI's shape. Nothing reaches the server."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            status, _, raw = await rig.post(s, {"model": "claude-9", **HI}, path=path)
            kind, message = _anthropic(raw)
            assert (status, kind) == (404, "not_found_error") and "claude-9" in message
        status, _, raw = await rig.post(s, HI, path="/v1/messages")
        assert (status, _anthropic(raw)[0]) == (400, "invalid_request_error")
        async with s.get(rig.url + "/v1/messages") as r:
            assert (r.status, _anthropic(await r.read())[0]) == (405, "invalid_request_error")
        async with s.post(rig.url + "/v1/messages/count_tokens", data=b'{"model":"chat"}',
                          headers={"Expect": "nope"}) as r:  # answered before any handler
            assert (r.status, _anthropic(await r.read())[0]) == (417, "invalid_request_error")
        status, _, raw = await rig.post(s, {"model": "gpt-9", "input": "hi"},
                                        path="/v1/responses")
        assert status == 404 and json.loads(raw)["error"]["code"] == 404
        assert rig.upstream.seen == []
    run(test)


def test_keys_apply_on_anthropics_paths_and_its_x_api_key_is_a_key() -> None:
    """§9 with ``api_key_file``: Anthropic's ``X-Api-Key`` (or a bearer key) is checked on
    ``/v1/messages``: missing or wrong → 401 ``authentication_error``, a bearer key and an
    ``X-Api-Key`` that differ → 400; the right key passes, and neither field reaches the server."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        for headers in ({}, {"X-Api-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
            status, _, raw = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages",
                                            headers=headers)
            assert (status, _anthropic(raw)[0]) == (401, "authentication_error"), headers
        status, _, raw = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages",
                                        headers={"X-Api-Key": "s3cret",
                                                 "Authorization": "Bearer other"})
        assert (status, _anthropic(raw)[0]) == (400, "invalid_request_error")
        assert rig.upstream.seen == []
        for headers in ({"X-Api-Key": "s3cret"}, {"Authorization": "Bearer s3cret"}):
            status, _, _ = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages",
                                          headers=headers)
            assert status == 200
        status, _, _ = await rig.post(s, {"model": "chat", "input": "hi"}, path="/v1/responses",
                                      headers={"X-Api-Key": "s3cret"})
        assert status == 200
        assert all("X-Api-Key" not in h and "Authorization" not in h
                   for _, _, h in rig.upstream.seen)
    run(test, key="s3cret")


def test_the_roles_own_key_goes_upstream_on_anthropics_path() -> None:
    """§9 a role with ``api_key_file``: its server gets ``Authorization: Bearer <its key>`` on
    ``/v1/messages``, streamed or not, never the client's ``X-Api-Key``."""
    with tempfile.TemporaryDirectory() as tmp:
        key_file = os.path.join(tmp, "key")
        with open(key_file, "w") as f:
            f.write("role-key\n")

        async def test(rig, s):
            rig.publish(_route(RouteState.READY, rig.upstream.port, key_file=key_file))
            for stream in (False, True):
                status, _, _ = await rig.post(s, {"model": "chat", **HI, "stream": stream},
                                              path="/v1/messages",
                                              headers={"X-Api-Key": "client-key"})
                assert status == 200
            for _, _, headers in rig.upstream.seen:
                assert headers["Authorization"] == "Bearer role-key"
                assert "client-key" not in json.dumps(headers)
        run(test)


def test_max_concurrency_queue_and_refusals_on_anthropics_path() -> None:
    """§9 ``/v1/messages`` under the chat rules: ``max_concurrency: 1`` holds the second stream in
    the queue until the first ends, and that queue is bounded by ``max_queue`` (429 beyond,
    as a readiness queue is); ``max_queue`` waiters for a role not ready: the next is 429
    ``rate_limit_error`` with ``Retry-After``; a wait past ``queue_timeout`` 504 ``api_error``;
    a refused role 503 ``overloaded_error``."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port, max_concurrency=1))
        held = [asyncio.ensure_future(rig.post(s, {"model": "chat", **HI, "stream": True,
                                                   "hold": True}, path="/v1/messages"))
                for _ in range(2)]
        await asyncio.sleep(0.3)
        assert len(rig.upstream.seen) == 1 and rig.book.snapshot()[0].of("chat").queued == 1
        status, headers, raw = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages")
        assert (status, headers.get("Retry-After")) == (429, "1")  # max_queue: 1 queued
        assert _anthropic(raw)[0] == "rate_limit_error"
        rig.upstream.go_on.set()
        assert [a[0] for a in await asyncio.gather(*held)] == [200, 200]
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        first = asyncio.ensure_future(rig.post(s, {"model": "chat", **HI}, path="/v1/messages"))
        while rig.book.waiting("chat") < 1:
            await asyncio.sleep(0.01)
        status, headers, raw = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages")
        assert (status, headers.get("Retry-After")) == (429, "1")
        assert _anthropic(raw)[0] == "rate_limit_error"
        status, _, raw = await first
        assert (status, _anthropic(raw)[0]) == (504, "api_error")
        rig.publish(_route(RouteState.REFUSED, rig.upstream.port, message="chat gave up"))
        status, _, raw = await rig.post(s, {"model": "chat", **HI}, path="/v1/messages")
        assert (status, _anthropic(raw)) == (503, ("overloaded_error", "chat gave up"))
    run(test, max_queue=1, queue_timeout=1.0)


def test_a_waiting_roles_messages_wake_the_daemon_and_go_when_ready() -> None:
    """§9 demand: ``/v1/messages`` requests for an on-demand role not running wait, are counted as
    demand (the daemon is woken), and go the moment a pass says the role is ready."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        pending = [asyncio.ensure_future(rig.post(s, {"model": "chat", **HI},
                                                  path="/v1/messages")) for _ in range(3)]
        while rig.book.waiting("chat") < 3:
            await asyncio.sleep(0.01)
        demand, seq = rig.book.snapshot()
        assert demand.of("chat").waiting == 3 and rig.wakes == 3
        rig.publish(_route(RouteState.READY, rig.upstream.port), seq=seq)
        assert [a[0] for a in await asyncio.wait_for(asyncio.gather(*pending), 5)] == [200] * 3
    run(test)


def test_a_messages_stream_in_flight_holds_a_stop_until_it_ends() -> None:
    """§9 a stop never cuts a request, on ``/v1/messages`` too: the daemon's thread closes the
    role and drains it while a stream is in flight; the drain ends only when the stream has,
    and the client got it whole."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        stream = asyncio.ensure_future(rig.post(s, {"model": "chat", **HI, "stream": True,
                                                    "hold": True}, path="/v1/messages"))
        while rig.book.snapshot()[0].of("chat").in_flight == 0:
            await asyncio.sleep(0.01)
        drained = []
        daemon = threading.Thread(target=lambda: (rig.book.close("chat", 1),
                                                  drained.append(rig.book.drain("chat", 10))))
        daemon.start()
        await asyncio.sleep(0.2)
        assert not drained
        rig.upstream.go_on.set()
        status, _, raw = await stream
        await asyncio.get_running_loop().run_in_executor(None, daemon.join)
        assert (status, raw, drained) == (200, MESSAGES_STREAM, [0])
    run(test)


def test_usage_of_anthropic_and_responses_answers_is_counted_per_key() -> None:
    """§9 token usage on the new routes, per client key: Anthropic's (input plus cache reads,
    the stream's from ``message_start`` and ``message_delta``) and the Responses API's
    (``response.completed``); count_tokens is a request without usage."""
    registry = CollectorRegistry()

    async def test(rig, s):
        rig.proxy.metrics = RouterMetrics(registry, node="n")
        rig.proxy._keys = clients.parse_keys(f"alice:{clients.digest('ka')}\n")  # noqa: SLF001
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        key = {"X-Api-Key": "ka"}
        for path, body in (("/v1/messages", HI), ("/v1/messages", {**HI, "stream": True}),
                           ("/v1/messages/count_tokens", HI),
                           ("/v1/responses", {"input": "hi", "stream": True})):
            status, _, raw = await rig.post(s, {"model": "chat", **body}, path=path,
                                            headers=key)
            assert status == 200, raw
    run(test)
    labels = {"node": "n", "role": "chat", "key": "alice"}
    get = registry.get_sample_value
    assert get("reconciler_router_client_requests_total", labels) == 4
    assert get("reconciler_router_tokens_total", {**labels, "kind": "prompt"}) == 54 + 37 + 54
    assert get("reconciler_router_tokens_total", {**labels, "kind": "completion"}) == 5 + 5 + 6


def test_usage_is_read_from_anthropic_and_responses_answers() -> None:
    """§9 ``clients.usage``: Anthropic's input counts its cache reads and writes; a stream's input
    comes from ``message_start``, its output from the later ``message_delta``; the Responses
    API's ``input_tokens`` already holds its cached ones."""
    assert clients.usage(MESSAGES_STREAM) == (37, 5)
    assert clients.usage(RESPONSES_STREAM) == (54, 6)
    assert clients.usage(b'{"usage":{"input_tokens":1,"cache_creation_input_tokens":4,'
                         b'"cache_read_input_tokens":53,"output_tokens":5}}') == (58, 5)
    assert clients.usage(b'{"input_tokens":54}') is None
