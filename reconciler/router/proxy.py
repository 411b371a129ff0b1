"""The router's HTTP sides, server and upstream client, on aiohttp (SHELL; the only module that imports aiohttp).

One aiohttp server on the router's loopback address; one aiohttp client
session for the roles' servers. A request goes through, in order:

1. ``Authorization: Bearer`` when ``api_key_file`` is set (compared in
   constant time) → 401;
2. the body, at most ``max_body`` bytes → 413; JSON with a ``model`` → 400;
3. the route (``rules.Table.find``): no such role → 404;
4. refused → 503; not ready → it waits in the role's queue (full → 429 with
   ``Retry-After``; too long → 504; refused meanwhile → 503);
5. forwarded to the role's own loopback port (never anywhere a request
   names), with the body as the server must see it and without hop-by-hop
   headers; the answer streams back chunk by chunk as it arrives, so SSE is
   never buffered. A connection the server refuses before taking the request
   (it was just stopped) goes back to the queue once; a server that fails
   after taking it → 502 (or, once the answer has begun, the client's
   connection is cut, so a truncated answer never looks whole).

A client that disconnects cancels its handler (``handler_cancellation``),
which closes the upstream connection: the server sees its client go and
stops generating.

Why aiohttp (measured, 1-token chat completions against the real
llama-server, 1,000 sequential requests): a proxy on aiohttp's server and
client added 0.5 ms at p50; uvicorn (httptools) with an httpx client added
2.8 ms at p50 and 223 ms at p99. aiohttp is also both sides in one library,
with a C HTTP parser and streaming in both directions.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time

import aiohttp
import attrs
from aiohttp import web

from reconciler.core.desired import RouterConfig
from reconciler.router import rules
from reconciler.world import probe
from reconciler.router.queues import Book, Refusal
from reconciler.router.rules import Api, Route, RouteState, Table

_JSON = "application/json"


class Proxy:
    """The aiohttp application, its runner and its upstream session, on the router's loop."""

    status = None  # report/statussite.Site: the status page on GET / (§11); None: 404

    def __init__(self, config: RouterConfig, book: Book, *, metrics=None,
                 api_key: str | None = None, connect_timeout: float = 2.0) -> None:
        self.config = config
        self.book = book
        self.metrics = metrics
        self.table = Table()
        self._key = api_key.encode() if api_key else None
        self._connect_timeout = connect_timeout
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> tuple[str, int]:
        """Listen on the configured loopback address; the address bound."""
        app = web.Application(client_max_size=self.config.max_body)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get(r"/{page:(status/[a-z.]+)?}", self._status)  # §11 the status page
        for path in rules.PATHS:
            app.router.add_post(path, self._forward)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._session = aiohttp.ClientSession(
            # Pooled connections go idle before the servers' own keep-alive timeout
            # (llama-server's is 5 s), so a pooled one is never closed under us.
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=4.0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port,
                           reuse_address=True)
        await site.start()
        sockets = site._server.sockets if site._server is not None else ()  # noqa: SLF001
        host, port = sockets[0].getsockname()[:2] if sockets else (self.config.host, 0)
        return str(host), int(port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------ answers

    def _error(self, status: int, message: str, kind: str, role: str | None = None,
               headers: dict[str, str] | None = None) -> web.Response:
        if role is not None and self.metrics is not None:
            self.metrics.request(role, status)
        return web.Response(status=status, body=rules.error_body(message, kind, status),
                            content_type=_JSON, headers=headers)

    def _authorized(self, request: web.Request) -> bool:
        if self._key is None:
            return True
        given = rules.bearer(request.headers.get("Authorization"))
        return given is not None and hmac.compare_digest(given.encode(), self._key)

    def _key_ok(self, given: str) -> bool:
        """The status page's check of a key it was given (as a bearer or Basic password)."""
        return self._key is not None and hmac.compare_digest(given.encode(), self._key)

    async def _unknown(self, request: web.Request) -> web.Response:
        return self._error(404, f"no route for {request.method} {request.path}",
                           "invalid_request_error")

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "a valid `Authorization: Bearer` key is required",
                               "authentication_error")
        return web.Response(body=rules.models_list(self.table), content_type=_JSON)

    async def _status(self, request: web.Request) -> web.StreamResponse:
        """§11 the read-only status page (``report/statussite.py`` makes every answer)."""
        if self.status is None:
            return await self._unknown(request)
        got = await self.status.answer(request.method, request.path, request.query_string,
                                       request.headers.get("Authorization"),
                                       key_ok=self._key_ok if self._key is not None else None)
        if got.chunks is None:
            return web.Response(status=got.status, body=got.body, headers=got.headers)
        answer = web.StreamResponse(status=got.status, headers=got.headers)
        await answer.prepare(request)
        async for chunk in got.chunks:
            await answer.write(chunk)
        return answer

    # ------------------------------------------------------------ forwarding

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        if not self._authorized(request):
            return self._error(401, "a valid `Authorization: Bearer` key is required",
                               "authentication_error")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"the request body is over max_body "
                               f"({self.config.max_body} bytes)", "invalid_request_error")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return self._error(400, "the body must be a JSON object naming a `model`",
                               "invalid_request_error")
        api = rules.PATHS[request.path]
        route = self.table.find(body["model"], api)
        if route is None:
            return self._error(404, f"the model `{body['model']}` does not exist on this node",
                               "invalid_request_error")
        role = route.role
        seq = self.book.arrived(role)
        payload = rules.upstream_body(body, route, api)
        streams = rules.streams(body, api)
        for attempt in (1, 2):
            ready = await self._ready(route, seq, arrived)
            if isinstance(ready, web.Response):
                return ready
            answer = await self._send(request, ready, payload, arrived, streams)
            if answer is not None:
                return answer
            # Refused before it took the request (stopped a moment ago): wait again, once.
            route = self.table.get(role) or ready
            route = route if route.state is not RouteState.READY else _waiting(route)
        return self._error(502, f"{role} refused the connection twice", "api_error", role)

    async def _ready(self, route: Route, seq: int, arrived: float) -> Route | web.Response:
        """The route to forward on now, or the error answer (refused, queue full, timed out)."""
        role = route.role
        if route.state is RouteState.READY:
            return route
        if route.state is RouteState.REFUSED and not route.on_demand:
            return self._error(503, route.message, "service_unavailable", role)
        if not rules.admits(self.book.waiting(role), self.config.max_queue):
            return self._error(429, f"{self.config.max_queue} requests already wait for {role}",
                               "rate_limit_error", role,
                               headers={"Retry-After": str(rules.RETRY_AFTER)})
        result = await self.book.wait(role, seq, self.config.queue_timeout)
        if self.metrics is not None:
            self.metrics.queue_wait(role, time.monotonic() - arrived)
        if isinstance(result, Refusal):
            kind = "timeout" if result.status == 504 else "service_unavailable"
            return self._error(result.status, result.message, kind, role)
        return result

    async def _send(self, request: web.Request, route: Route, payload: bytes,
                    arrived: float, streams: bool) -> web.StreamResponse | None:
        """Forward and stream the answer back; None when the server refused the connection."""
        assert self._session is not None
        role = route.role
        url = f"http://{route.authority}{request.path}"
        headers = rules.request_headers(request.headers.items())
        key = probe.api_key(route.key_file)  # the role's own key; the client's is never passed
        if key:
            headers.append(("Authorization", f"Bearer {key}"))
        if streams:
            # llama-server closes its end right after an SSE answer; said up front, the
            # connection is not pooled, so no later request races that close.
            headers.append(("Connection", "close"))
        self.book.forwarding(role)
        try:
            try:
                upstream = await self._session.post(url, data=payload, headers=headers,
                                                    allow_redirects=False)
            except aiohttp.ClientConnectorError:
                return None
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return self._error(502, f"{role} failed before answering: {_why(exc)}",
                                   "api_error", role)
            async with upstream:
                return await self._relay(request, route, upstream, arrived)
        finally:
            self.book.finished(role)

    async def _relay(self, request: web.Request, route: Route,
                     upstream: aiohttp.ClientResponse, arrived: float) -> web.StreamResponse:
        role = route.role
        answer = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                    headers=rules.forward_headers(upstream.headers.items()))
        if upstream.content_length is not None:
            answer.content_length = upstream.content_length
        first = True
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    first = False
                    await answer.prepare(request)
                    if self.metrics is not None:
                        self.metrics.first_byte(role, time.monotonic() - arrived)
                await answer.write(chunk)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            if not answer.prepared:
                return self._error(502, f"{role} failed while answering: {_why(exc)}",
                                   "api_error", role)
            # Mid-answer: cut the client's connection; a truncated answer must not look whole.
            if request.transport is not None:
                request.transport.abort()
            if self.metrics is not None:
                self.metrics.request(role, 502)
            return answer
        if not answer.prepared:
            await answer.prepare(request)
        await answer.write_eof()
        if self.metrics is not None:
            self.metrics.request(role, upstream.status)
        return answer


def _waiting(route: Route) -> Route:
    """``route`` as if its role were not ready: the request waits for the next pass."""
    return attrs.evolve(route, state=RouteState.WAIT)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
