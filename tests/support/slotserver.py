"""A stand-in for llama-server's slots, for the router's balancing tests and benchmarks (§9.1).

``SlotServer`` listens on a loopback port (aiohttp) and behaves, for the router, as
llama-server does: ``GET /health`` 200, ``GET /props`` with ``total_slots``, and
``POST /v1/chat/completions`` served by at most ``slots`` requests at once (the rest wait
inside the server, in arrival order, as llama-server's queue does), each taking
``per_token`` seconds per ``max_tokens`` (streamed as one SSE event per token when
``stream: true``). It counts what it was sent and the most it served at once, answers 500
while ``failing``, and ``kill()`` drops every connection and stops listening, at once,
as a ``kill -9`` of the server does (``start()`` on the same port brings it back).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web


class SlotServer:
    def __init__(self, slots: int = 2, per_token: float = 0.001, port: int = 0,
                 name: str = "") -> None:
        self.slots = slots
        self.per_token = per_token
        self.port = port
        self.name = name
        self.sent = 0  # requests received
        self.serving = 0  # in a slot now
        self.inside = 0  # received and not answered (slot or queue)
        self.most = 0  # the most served at once
        self.most_inside = 0
        self.failing = False
        self.killed_at: float | None = None
        self._sem: asyncio.Semaphore | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._transports: set = set()

    async def start(self) -> None:
        self._sem = asyncio.Semaphore(self.slots)
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        self.port = self._site._server.sockets[0].getsockname()[1]  # noqa: SLF001
        self.killed_at = None

    async def kill(self) -> None:
        """Stop listening and reset every open connection (a kill -9)."""
        self.killed_at = asyncio.get_running_loop().time()
        if self._site is not None and self._site._server is not None:  # noqa: SLF001
            self._site._server.close()  # noqa: SLF001
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({"total_slots": self.slots})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self._transports.add(request.transport)
        body = await request.json()
        self.sent += 1
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            if self.failing:
                return web.json_response({"error": {"message": "failing"}}, status=500)
            tokens = int(body.get("max_tokens") or 1)
            assert self._sem is not None
            async with self._sem:
                self.serving += 1
                self.most = max(self.most, self.serving)
                try:
                    return await self._answer(request, body, tokens)
                finally:
                    self.serving -= 1
        finally:
            self.inside -= 1
            self._transports.discard(request.transport)

    async def _answer(self, request: web.Request, body: dict,
                      tokens: int) -> web.StreamResponse:
        if not body.get("stream"):
            await asyncio.sleep(self.per_token * tokens)
            return web.json_response({"object": "chat.completion", "model": self.name,
                                      "choices": [{"index": 0, "message": {
                                          "role": "assistant", "content": "x" * tokens},
                                          "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": 1,
                                                "completion_tokens": tokens}})
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        for _ in range(tokens):
            await asyncio.sleep(self.per_token)
            event = {"object": "chat.completion.chunk", "model": self.name,
                     "choices": [{"index": 0, "delta": {"content": "x"}}]}
            await answer.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await answer.write(b"data: [DONE]\n\n")
        await answer.write_eof()
        return answer


async def _serve(port: int, slots: int, per_token: float) -> None:
    server = SlotServer(slots=slots, per_token=per_token, port=port)
    await server.start()

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"sent": server.sent, "inside": server.inside,
                                  "serving": server.serving, "most": server.most,
                                  "most_inside": server.most_inside})
    assert server._runner is not None  # noqa: SLF001
    extra = web.Application()
    extra.router.add_get("/stats", stats)
    runner = web.AppRunner(extra, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port + 1000).start()  # the bench's side door
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":  # one server per process, for benchmarks that kill -9 one
    import sys

    asyncio.run(_serve(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
