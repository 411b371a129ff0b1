"""The router's HTTP sides in one process (BEHAVIOUR §9): every refusal, the queue, the hand-off.

A real aiohttp ``Proxy`` on a loopback port, a ``Book`` whose ``wake`` is
counted, a routing table set by hand (as ``Router._apply`` does after a
pass) and, as the role's server, a small aiohttp application that answers
chat completions and streams (tests/support/proxyrig.py). No planner, no
daemon, no real server: those are in ``test_router_e2e.py``.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from reconciler.router.rules import RouteState
from tests.support import proxyrig
from tests.support.proxyrig import AppUpstream


class Upstream(AppUpstream):
    """The role's server: records what it got; streams three SSE events on request."""

    paths = ("/v1/chat/completions",)

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[dict, dict]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((body, dict(request.headers)))
        if body.get("die"):
            request.transport.abort()
            await asyncio.sleep(1)
        if not body.get("stream"):
            answer = {"model": body.get("model"), "ok": True}
            if body.get("usage"):
                prompt, completion = body["usage"]
                answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
            return web.json_response(answer, headers={"X-Upstream": "1"})
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        if body.get("big"):  # pieces of 64 KiB, each its own pattern
            for i in range(body["big"]):
                await answer.write(bytes([65 + i % 26]) * 65536)
            await answer.write_eof()
            return answer
        if body.get("hold"):
            await answer.write(b"data: first\n\n")
            await self.go_on.wait()
            await answer.write(b"data: second\n\n")
            await answer.write_eof()
            return answer
        for i in range(3):
            await answer.write(f"data: {i}\n\n".encode())
        await answer.write(b"data: [DONE]\n\n")
        await answer.write_eof()
        return answer


_route = proxyrig.route


def run(test, *, key: str | None = None, **config) -> None:
    """Run ``test(rig, session)`` with a started proxy and upstream."""
    proxyrig.run(test, Upstream, key=key, **config)


def _error(raw: bytes) -> dict:
    return json.loads(raw)["error"]


def test_ready_role_is_forwarded_renamed_without_hop_by_hop_headers() -> None:
    """A READY route: the server gets its own model name, no Authorization or Connection names."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, headers, raw = await rig.post(
            s, {"model": "qwen"}, headers={"Connection": "keep-alive, X-Drop", "X-Drop": "1",
                                           "X-Keep": "2"})
        assert (status, json.loads(raw)) == (200, {"model": "served", "ok": True})
        assert headers["X-Upstream"] == "1"
        body, seen = rig.upstream.seen[0]
        assert body == {"model": "served"}
        assert "X-Drop" not in seen and seen["X-Keep"] == "2"
    run(test)


def test_streaming_is_passed_through_event_by_event() -> None:
    """SSE arrives whole and in order through the router."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, headers, raw = await rig.post(s, {"model": "chat", "stream": True})
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        assert raw == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    run(test)


def test_streaming_is_unbuffered() -> None:
    """The first SSE event reaches the client while the server still holds back the second."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        async with s.post(rig.url + "/v1/chat/completions",
                          data=json.dumps({"model": "chat", "stream": True, "hold": True})) as r:
            first = await asyncio.wait_for(r.content.readline(), 3)
            assert first == b"data: first\n"
            rig.upstream.go_on.set()
            assert (await r.read()).endswith(b"data: second\n\n")
    run(test)


def test_a_big_stream_reaches_a_client_that_reads_late_whole_and_in_order(monkeypatch) -> None:
    """The client's buffers fill: the router stops reading its server until they drain."""
    from reconciler.router import upstream

    drained = []
    resume = upstream.Stream.resume
    monkeypatch.setattr(upstream.Stream, "resume",
                        lambda self: (drained.append(1), resume(self))[1])

    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        pieces = 256  # 16 MiB: more than the kernel's loopback buffers hold
        async with s.post(rig.url + "/v1/chat/completions",
                          data=json.dumps({"model": "chat", "stream": True, "big": pieces})) as r:
            await asyncio.sleep(0.5)  # reads nothing meanwhile
            raw = await asyncio.wait_for(r.read(), 20)
        assert raw == b"".join(bytes([65 + i % 26]) * 65536 for i in range(pieces))
        assert drained  # it waited for the client at least once
    run(test)


class Counted:
    """The router's metrics as the proxy calls them: answered requests recorded, the rest ignored."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []

    def request(self, role: str, code: int) -> None:
        self.requests.append((role, code))

    def __getattr__(self, name):
        return lambda *args, **kw: None


def test_a_stream_whose_client_leaves_after_the_last_event_is_counted() -> None:
    """An SSE client closes at its last event (openai's at ``data: [DONE]``), before the body's
    end: the handler is cancelled, and the answer is still counted with the status it got."""
    async def test(rig, s):
        rig.proxy.metrics = counted = Counted()
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        async with s.post(rig.url + "/v1/chat/completions",
                          data=json.dumps({"model": "chat", "stream": True, "hold": True})) as r:
            assert await asyncio.wait_for(r.content.readline(), 3) == b"data: first\n"
            r.close()  # gone, with the server still holding the rest
        for _ in range(300):
            if counted.requests:
                break
            await asyncio.sleep(0.01)
        rig.upstream.go_on.set()
        assert counted.requests == [("chat", 200)]
    run(test)


def test_unknown_model_and_bad_body_and_path() -> None:
    """Unknown model → 404, no `model` → 400, unknown path → 404, each OpenAI-shaped."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, _, raw = await rig.post(s, {"model": "gpt-9"})
        assert status == 404 and _error(raw)["type"] == "invalid_request_error"
        assert "gpt-9" in _error(raw)["message"]
        status, _, raw = await rig.post(s, {"messages": []})
        assert status == 400 and _error(raw)["code"] == 400
        status, _, raw = await rig.post(s, {"model": "chat"}, path="/v1/nothing")
        assert status == 404 and rig.upstream.seen == []
    run(test)


def test_waiters_go_the_moment_the_role_is_published_ready() -> None:
    """Requests for a waiting role are counted, wake the daemon, and go when a pass says ready."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        pending = [asyncio.ensure_future(rig.post(s, {"model": "chat"})) for _ in range(5)]
        for _ in range(100):
            if rig.book.waiting("chat") == 5:
                break
            await asyncio.sleep(0.01)
        demand, seq = rig.book.snapshot()
        assert (demand.of("chat").waiting, seq, rig.wakes) == (5, 5, 5)
        assert demand.of("chat").last_request is not None
        rig.publish(_route(RouteState.READY, rig.upstream.port), seq=seq)
        answers = await asyncio.wait_for(asyncio.gather(*pending), 5)
        assert [a[0] for a in answers] == [200] * 5
        assert rig.book.snapshot()[0].of("chat").waiting == 0
    run(test)


def test_full_queue_is_429_with_retry_after() -> None:
    """Beyond max_queue waiters a request gets 429 and Retry-After at once."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        first = asyncio.ensure_future(rig.post(s, {"model": "chat"}))
        while rig.book.waiting("chat") < 1:
            await asyncio.sleep(0.01)
        status, headers, raw = await rig.post(s, {"model": "chat"})
        assert status == 429 and headers["Retry-After"] == "1"
        assert _error(raw)["type"] == "rate_limit_error"
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        assert (await first)[0] == 200
    run(test, max_queue=1, queue_timeout=3.0)  # a mutant without the bound fails in 3 s


def test_queue_timeout_is_504() -> None:
    """A request that waits longer than queue_timeout gets 504 and leaves the queue."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        status, _, raw = await rig.post(s, {"model": "chat"})
        assert status == 504 and "timed out after 0.2s" in _error(raw)["message"]
        assert rig.book.waiting("chat") == 0
    run(test, queue_timeout=0.2)


def test_refused_role_is_503_with_the_plans_message() -> None:
    """A waiter counted by the pass that refuses its role gets 503 with the plan's words."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        pending = asyncio.ensure_future(rig.post(s, {"model": "chat"}))
        while rig.book.waiting("chat") < 1:
            await asyncio.sleep(0.01)
        _, seq = rig.book.snapshot()
        rig.publish(_route(RouteState.REFUSED, rig.upstream.port, on_demand=True,
                           message="chat cannot start: coder holds 6 GB"), seq=seq)
        status, _, raw = await pending
        assert status == 503 and _error(raw)["message"] == "chat cannot start: coder holds 6 GB"
    run(test)


def test_a_waiter_the_pass_did_not_count_keeps_waiting() -> None:
    """An on-demand refusal fails only waiters its snapshot counted; a later one waits on."""
    async def test(rig, s):
        rig.publish(_route(RouteState.WAIT, rig.upstream.port, on_demand=True))
        pending = asyncio.ensure_future(rig.post(s, {"model": "chat"}))
        while rig.book.waiting("chat") < 1:
            await asyncio.sleep(0.01)
        rig.publish(_route(RouteState.REFUSED, rig.upstream.port, on_demand=True,
                           message="no"), seq=0)
        await asyncio.sleep(0.1)
        assert not pending.done()
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        assert (await pending)[0] == 200
    run(test)


def test_bearer_key_is_required_when_configured() -> None:
    """With api_key_file: no key or a wrong key → 401 (nothing forwarded); the right key passes."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, _, raw = await rig.post(s, {"model": "chat"}, headers=headers)
            assert status == 401 and _error(raw)["type"] == "authentication_error"
        async with s.get(rig.url + "/v1/models") as r:
            assert r.status == 401
        status, _, _ = await rig.post(s, {"model": "chat"},
                                      headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and len(rig.upstream.seen) == 1
        assert "Authorization" not in rig.upstream.seen[0][1]
    run(test, key="s3cret")


def test_the_whole_bearer_key_must_match() -> None:
    """§9 api_key_file: a key that only starts like the router's (or is it with more after,
    or a prefix of it) is 401, nothing forwarded; only the whole key passes."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        for near in ("s3cXXX", "s3cret2", "s3c"):
            status, _, _ = await rig.post(s, {"model": "chat"},
                                          headers={"Authorization": f"Bearer {near}"})
            assert status == 401, near
        assert rig.upstream.seen == []
    run(test, key="s3cret")


def test_oversized_body_is_413() -> None:
    """A body over max_body gets 413 and is never forwarded."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, _, raw = await rig.post(s, {"model": "chat", "pad": "x" * 2048})
        assert status == 413 and "max_body" in _error(raw)["message"]
        assert rig.upstream.seen == []
    run(test, max_body=1024)


def test_a_server_that_dies_before_answering_is_502() -> None:
    """The server takes the request and drops the connection: 502, OpenAI-shaped."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, _, raw = await rig.post(s, {"model": "chat", "die": True})
        assert status == 502 and _error(raw)["type"] == "api_error"
        assert rig.book.snapshot()[0].of("chat").in_flight == 0
    run(test)


def test_models_lists_roles() -> None:
    """GET /v1/models lists the published roles."""
    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port, status="running"))
        async with s.get(rig.url + "/v1/models") as r:
            listed = await r.json()
        assert [(m["id"], m["status"]) for m in listed["data"]] == [("chat", "running")]
    run(test)


def test_the_roles_own_key_goes_upstream_never_the_clients(tmp_path) -> None:
    """A role with api_key_file: the server gets `Bearer <its key>`; the router's client key
    is never passed on; a role without one gets no Authorization at all."""
    key_file = tmp_path / "key"
    key_file.write_text("# llama-server reads the first key line\nrole-secret\n")

    async def test(rig, s):
        rig.publish(_route(RouteState.READY, rig.upstream.port, key_file=str(key_file)))
        status, _, _ = await rig.post(s, {"model": "qwen"},
                                      headers={"Authorization": "Bearer client-key"})
        assert status == 200
        assert rig.upstream.seen[-1][1]["Authorization"] == "Bearer role-secret"
        rig.publish(_route(RouteState.READY, rig.upstream.port))
        status, _, _ = await rig.post(s, {"model": "qwen"},
                                      headers={"Authorization": "Bearer client-key"})
        assert status == 200 and "Authorization" not in rig.upstream.seen[-1][1]
    run(test, key="client-key")

