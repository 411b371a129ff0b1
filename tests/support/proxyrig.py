"""The router's ``Proxy`` in one process beside a small aiohttp upstream (tests/router, §9).

A real ``Proxy`` on a loopback port, a ``Book`` whose ``wake`` is counted, a
routing table set by hand (as ``Router._apply`` does after a pass) and, as the
role's server, an ``AppUpstream``: each test module says which paths it answers
and how (chat completions in test_proxy.py, Anthropic's and the Responses API in
test_apis.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from reconciler.core.desired import RouterConfig
from reconciler.router.proxy import Proxy
from reconciler.router.queues import Book
from reconciler.router.rules import Route, RouteState, Table


class AppUpstream:
    """The role's server on a loopback port: ``paths`` answered by ``answer`` (POST)."""

    paths: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.port = 0
        self.go_on = asyncio.Event()  # for "hold": the rest of a stream waits for this
        self._runner: web.AppRunner | None = None

    async def answer(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        for path in self.paths:
            app.router.add_post(path, self.answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001

    async def close(self) -> None:
        await self._runner.cleanup()


def route(state: RouteState, port: int, **kw) -> Route:
    """The role ``chat`` (also asked for as ``qwen``), its server calling the model ``served``."""
    return Route(role="chat", names=("chat", "qwen"), host="127.0.0.1", port=port, state=state,
                 upstream_model="served", **kw)


class Rig:
    """A proxy, its book (wakes counted) and the upstream; ``url`` once started."""

    def __init__(self, config: RouterConfig, key: str | None, upstream: AppUpstream) -> None:
        self.wakes = 0
        self.book = Book(self._wake)
        self.proxy = Proxy(config, self.book, api_key=key)
        self.upstream = upstream
        self.url = ""

    def _wake(self) -> None:
        self.wakes += 1

    def publish(self, *routes: Route, seq: int = 10**9) -> None:
        table = Table(routes=routes)
        self.proxy.table = table
        self.book.publish(table, seq)

    async def post(self, session, body, path="/v1/chat/completions", **kw):
        async with session.post(self.url + path, data=json.dumps(body).encode(), **kw) as r:
            return r.status, dict(r.headers), await r.read()


def run(test: Callable[[Rig, aiohttp.ClientSession], Awaitable[None]],
        upstream: Callable[[], AppUpstream], *, key: str | None = None, **config) -> None:
    """Run ``test(rig, session)`` with a started proxy and a started ``upstream()``."""
    async def main():
        rig = Rig(RouterConfig(host="127.0.0.1", port=0, **config), key, upstream())
        await rig.upstream.start()
        host, port = await rig.proxy.start()
        rig.url = f"http://{host}:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                await test(rig, session)
        finally:
            rig.book.fail_all("closing")
            await rig.proxy.close()
            await rig.upstream.close()
    asyncio.run(main())
