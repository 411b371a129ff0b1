"""The router's HTTP sides, server and upstream client, on aiohttp (SHELL; the only module that imports aiohttp).

One aiohttp server on the router's loopback address; one aiohttp client session for the roles'
servers. A request goes through, in order:

1. a credential field given twice (two ``Authorization``), or a bearer key and an
   ``X-Api-Key`` that differ → 400; a key (``Authorization: Bearer`` or ``X-Api-Key``,
   Anthropic's clients' field) when ``api_key_file`` or ``api_keys_file`` is set (digests
   compared in constant time) → 401; a CORS preflight from outside ``cors_origins`` → 403;
2. the body, at most ``max_body`` bytes (→ 413) within ``body_timeout`` (→ 408); JSON with a
   ``model``, decodable, not nested beyond reason, without lone surrogates → else 400;
3. the route (``rules.Table.find``): no such role → 404;
4. refused → 503; not ready, or no place under ``max_concurrency`` → it waits (429 with
   ``Retry-After``, 504, 503: ``dispatch.py``, with a group's choice);
5. forwarded to the role's own loopback port (never anywhere a request names), with the body
   as the server must see it and without hop-by-hop headers; the answer streams back chunk by
   chunk as it arrives, so SSE is never buffered; the tail of the answer gives the client's
   token usage. A streamed answer goes on a connection of its own through ``upstream.py`` (not
   aiohttp's client: it costs the router less CPU per stream and per event, see there), any
   other on aiohttp's pooled keep-alive connections. A server that fails after taking it: 502
   (once the answer has begun, the client's connection is cut: no truncated answer looks whole).

Connections: at most ``guard.connection_cap`` at once (503 beyond), a whole request head
within ``idle_timeout`` of a connection's opening or its last answer (aiohttp's keep-alive
timer, armed at the opening; a slow or silent client is closed), and every error the router
answers itself in the shape of the path's API (Anthropic's on ``/v1/messages…``, OpenAI's
elsewhere, the HTTP layer's own included); client mistakes are logged by ``guard.Hush``, never
with a traceback. A client that disconnects cancels its handler (``handler_cancellation``),
which closes the upstream connection: the server sees its client go and stops generating.

Why aiohttp (measured, 1-token chat completions against the real llama-server, 1,000
sequential requests): a proxy on aiohttp's server and client added 0.5 ms at p50; uvicorn
(httptools) with an httpx client added 2.8 ms at p50 and 223 ms at p99. aiohttp is also both
sides in one library, with a C HTTP parser and streaming in both directions.

Size: aiohttp may be imported by this one module (the import test's owner rule), so what
touches its objects is here: the server's handlers in request order, the pooled upstream
request, an answer relayed onto the client's response. Where a request goes upstream, failover
and readiness are ``dispatch.py`` (the base class, no aiohttp); the pure rules ``rules.py``;
limits ``guard.py``; keys, CORS ``clients.py``; error shapes ``apis.py``.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import logging
import time
import zlib
from typing import Callable

import aiohttp
from aiohttp import web, web_protocol

from reconciler.core.desired import RouterConfig
from reconciler.router import apis, clients, guard, rules, upstream
from reconciler.router.dispatch import Dispatcher
from reconciler.router.queues import Book
from reconciler.router.rules import Route
from reconciler.world import probe

_JSON = "application/json"
_TAIL = 4  # the last chunks of an answer kept for its usage


class Proxy(Dispatcher):
    """The aiohttp application, its listener and its upstream session, on the router's loop."""

    status = None  # report/statussite.Site: the status page on GET / (§11); None: 404

    def __init__(self, config: RouterConfig, book: Book, *, metrics=None,
                 api_key: str | None = None, keys: dict[str, str] | None = None,
                 connect_timeout: float = 2.0, on_ready: Callable[[], None] | None = None,
                 hush: guard.Hush | None = None) -> None:
        super().__init__(config, book, metrics, on_ready, connect_timeout)
        self._key = api_key.encode() if api_key else None
        self._keys = keys
        self.hush = hush or guard.Hush()
        self.gauge = guard.Gauge(guard.connection_cap(config.max_connections), self.hush)
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> tuple[str, int]:
        """Listen on the configured loopback address; the address bound."""
        app = web.Application(client_max_size=self.config.max_body, middlewares=[self._shape])
        app.router.add_get("/v1/models", self._models, expect_handler=self._expect)
        app.router.add_get(r"/{page:(status/[a-z.]+)?}", self._status,  # §11 the status page
                           expect_handler=self._expect)
        for path in rules.PATHS:
            app.router.add_post(path, self._forward, expect_handler=self._expect)
        app.router.add_route("*", "/{tail:.*}", self._unknown, expect_handler=self._expect)
        if self.config.cors_origins:
            app.on_response_prepare.append(self._cors)
        self._session = aiohttp.ClientSession(
            # Pooled connections go idle before the servers' own keep-alive timeout
            # (llama-server's is 5 s), so a pooled one is never closed under us.
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=4.0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     keepalive_timeout=self.config.idle_timeout,
                                     lingering_time=min(2.0, self.config.body_timeout))
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        guarded = type("_Guarded", (guard.GuardedConnection, web_protocol.RequestHandler),
                       {"gauge": self.gauge, "handle_error": _handle_error})
        kwargs = dict(server._kwargs)  # noqa: SLF001  (the runner's handler settings)
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: guarded(server, loop=loop, **kwargs), self.config.host, self.config.port,
            reuse_address=True, backlog=1024)
        host, port = self._listener.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------ answers

    def _error(self, status: int, message: str, kind: str, role: str | None = None,
               headers: dict[str, str] | None = None) -> web.Response:
        if role is not None and self.metrics is not None:
            self.metrics.request(role, status)
        return _Refusal(message, status=status, body=apis.error_body(message, kind, status),
                        content_type=_JSON, headers=headers)

    @web.middleware
    async def _shape(self, request: web.Request, handler) -> web.StreamResponse:
        """Every error in the shape of the path's API: aiohttp's own (405, 417 …) and our bugs
        (500) too, Anthropic's on its paths, OpenAI's elsewhere; an ambiguous credential is
        400 before any handler reads one (§9)."""
        return _in_shape(request, await self._answer(request, handler))

    async def _answer(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            if (twice := apis.ambiguous(request.headers.items())) is not None:
                return self._error(400, twice, "invalid_request_error")
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return self._error(exc.status, exc.reason or "request refused",
                               "invalid_request_error", headers=_safe_headers(exc))
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # a bug of ours: one traceback per interval, a 500
            self.hush.say(f"bug-{type(exc).__name__}", "router: the request failed",
                          level=logging.ERROR, exc_info=exc)
            return self._error(500, "the router failed on this request", "api_error")

    async def _expect(self, request: web.Request) -> web.Response | None:
        """``Expect: 100-continue`` is answered; any other expectation is 417 (OpenAI-shaped)."""
        expect = request.headers.get("Expect", "")
        if expect.lower() != "100-continue":  # answered before the middleware: shaped here
            return _in_shape(request, self._error(417, f"unknown Expect: {expect[:100]}",
                                                  "invalid_request_error"))
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        return None

    def _client(self, request: web.Request) -> str | None | bool:
        """The client's name (``anonymous`` without keys); False: not authorized."""
        if self._key is None and self._keys is None:
            return "anonymous"
        given = apis.credential(request.headers)
        if given is None:
            return False
        raw = given.encode("utf-8", "surrogateescape")
        if self._key is not None and hmac.compare_digest(raw, self._key):
            return "default"
        name = clients.client_of(given, self._keys) if self._keys is not None else None
        return name if name is not None else False

    def _unauthorized(self) -> web.Response:
        return self._error(401, "a valid key is required (`Authorization: Bearer` or "
                           "`X-Api-Key`)", "authentication_error")

    def _key_ok(self, given: str) -> bool:
        """The status page's check of a key it was given (as a bearer or Basic password)."""
        return self._key is not None and hmac.compare_digest(
            given.encode("utf-8", "surrogateescape"), self._key)

    async def _unknown(self, request: web.Request) -> web.Response:
        if request.path in rules.PATHS and request.method != "OPTIONS":
            return self._error(405, f"{request.path} takes POST", "invalid_request_error",
                               headers={"Allow": "POST"})
        if request.method == "OPTIONS" and "Origin" in request.headers:
            origin = request.headers["Origin"]
            headers = clients.cors(origin, self.config.cors_origins, preflight=True,
                                   asked=request.headers.get("Access-Control-Request-Headers"))
            if not headers:
                return self._error(403, f"origin {origin[:200]} is not in cors_origins",
                                   "permission_error")
            return web.Response(status=204, headers=headers)
        return self._error(404, f"no route for {request.method} {request.path[:200]}",
                           "invalid_request_error")

    async def _cors(self, request: web.Request, response: web.StreamResponse) -> None:
        for key, value in clients.cors(request.headers.get("Origin"),
                                       self.config.cors_origins).items():
            response.headers.setdefault(key, value)

    async def _models(self, request: web.Request) -> web.Response:
        if self._client(request) is False:
            return self._unauthorized()
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
        client = self._client(request)
        if client is False:
            return self._unauthorized()
        raw = await self._body(request)
        if isinstance(raw, web.Response):
            return raw
        body = _parse(raw)
        if isinstance(body, str):
            return self._error(400, body, "invalid_request_error")
        api = rules.PATHS[request.path]
        routes = self.table.target(body["model"], api)
        if not routes:
            return self._error(404, f"the model `{body['model'][:200]}` does not exist on "
                               "this node", "invalid_request_error")
        route = routes[0]
        try:
            payload = rules.upstream_body(body, route, api)
        except UnicodeEncodeError:
            return self._error(400, "the body holds a lone surrogate (\\ud800-\\udfff), which "
                               "is not Unicode text", "invalid_request_error")
        streams = rules.streams(body, api)
        if len(routes) > 1:
            return await self._forward_group(request, route.group, payload, arrived, streams,
                                             client)
        return await self._forward_role(request, route, payload, arrived, streams, client)

    async def _body(self, request: web.Request) -> bytes | web.Response:
        try:
            async with asyncio.timeout(self.config.body_timeout):  # no task, unlike wait_for
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"the request body is over max_body "
                               f"({self.config.max_body} bytes)", "invalid_request_error")
        except asyncio.TimeoutError:
            answer = self._error(408, f"the body did not arrive within body_timeout "
                                 f"({self.config.body_timeout:g}s)", "invalid_request_error")
            answer.force_close()  # no lingering for the rest of a body that does not come
            return answer
        except (web_protocol.RequestPayloadError, aiohttp.http_exceptions.HttpProcessingError,
                zlib.error, EOFError, ValueError) as exc:
            return self._error(400, f"the body cannot be read: {_why(exc)}"[:300],
                               "invalid_request_error")

    async def _send(self, request: web.Request, route: Route, payload: bytes,
                    arrived: float, streams: bool, client: str,
                    fail=None) -> web.StreamResponse | None:
        """Forward and stream the answer back; None when the server refused the connection.
        The caller took the place (``Book.enter``); it is given back here."""
        assert self._session is not None
        role = route.role
        headers = rules.request_headers(request.headers.items())
        key = probe.api_key(route.key_file)  # the role's own key; the client's is never passed
        if key:
            headers.append(("Authorization", f"Bearer {key}"))
        try:
            if streams:
                return await self._send_stream(request, route, payload, headers, arrived,
                                               client, fail)
            try:
                answer = await self._session.post(f"http://{route.authority}{request.path}",
                                                  data=payload, headers=headers,
                                                  allow_redirects=False)
            except aiohttp.ClientConnectorError:
                return None
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if fail is not None:
                    fail(f"failed before answering: {_why(exc)}", True)
                return self._error(502, f"{role} failed before answering: {_why(exc)}",
                                   "api_error", role)
            async with answer:
                return await self._relay(
                    request, role, answer.status, answer.reason,
                    list(answer.headers.items()), answer.content_length,
                    answer.content.readany, arrived, client, fail=fail)
        finally:
            self.book.finished(role)

    async def _relay(self, request: web.Request, role: str, status: int, reason: str | None,
                     fields: list[tuple[str, str]], length: int | None, read,
                     arrived: float, client: str,
                     pipe: upstream.Stream | None = None, fail=None) -> web.StreamResponse:
        """The answer to the client, chunk by chunk as ``read()`` gives them; a stream's
        chunked answer through ``pipe`` after its first piece (no task switch per event)."""
        if status >= 500 and fail is not None:
            fail(f"answered {status}", False)  # §9.1 relayed as it is; the next go elsewhere
        answer = _Answer(status=status, reason=reason, headers=rules.forward_headers(fields))
        if length is not None:
            answer.content_length = length
        tail: collections.deque[bytes] = collections.deque(maxlen=_TAIL)
        counted = False  # a client holding its whole answer must find it counted
        write = answer.write
        try:
            chunk = head = await read()
            await answer.prepare(request)
            if self.metrics is not None:
                self.metrics.first_byte(role, time.monotonic() - arrived)
            left = length  # None: chunked, ended by write_eof
            if (chunk and pipe is not None and request.transport is not None
                    and answer.headers.get("Transfer-Encoding") == "chunked"):
                tail.append(chunk)
                await write(chunk)  # the head and the first piece, through aiohttp
                pipe.pipe(request.transport, tail)  # the rest, as aiohttp would frame it
                while not await pipe.piped():
                    await request.writer.drain()
                    pipe.resume()
                chunk = b""
            while chunk:
                tail.append(chunk)
                if left is not None:
                    left -= len(chunk)
                    if left <= 0:  # the last bytes: counted before the client can have them
                        counted = self._count(role, status, client, head, tail)
                await write(chunk)
                chunk = await read()
        except asyncio.CancelledError:
            # The client left (handler_cancellation) with the head sent: its answer is
            # counted as the status it got, as an access log would (an SSE client often
            # closes at ``data: [DONE]``, before the body's last chunk is written).
            if answer.prepared and not counted:
                self._count(role, status, client, head, tail)
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, upstream.Failed) as exc:
            if fail is not None:
                fail(f"failed while answering: {_why(exc)}", True)
            if not answer.prepared:
                return self._error(502, f"{role} failed while answering: {_why(exc)}",
                                   "api_error", role)
            # Mid-answer: cut the client's connection; a truncated answer must not look whole.
            if request.transport is not None:
                request.transport.abort()
            if self.metrics is not None:
                self.metrics.request(role, 502)
            return answer
        if not counted:  # a chunked answer ends with write_eof: count it first
            counted = self._count(role, status, client, head, tail)
        await answer.write_eof()
        return answer

    async def _get(self, url: str, timeout: float, headers: dict[str, str] | None = None,
                   *, json: bool = False) -> tuple[int, object]:
        """``GET url`` on the upstream session within ``timeout`` seconds: the status (0: no
        answer) and, with ``json``, the body of a 200 as JSON (None otherwise)."""
        assert self._session is not None
        try:
            async with self._session.get(url, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                if not json or answer.status != 200:
                    return answer.status, None
                try:
                    return answer.status, await answer.json(content_type=None)
                except ValueError:
                    return answer.status, None
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return 0, None


class _Refusal(web.Response):
    """An error the router answers itself (not a server's), its message kept: the middleware
    writes it in the shape of the path's API."""

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.message = message


class _Answer(web.StreamResponse):
    """A relayed answer: its head leaves with its first body bytes, in one write, as
    ``web.Response``'s does (aiohttp sends a ``StreamResponse``'s head alone at ``prepare``:
    one more send and one more wake-up of the client per request)."""

    _send_headers_immediately = False


def _handle_error(self, request, status: int = 500, exc=None, message=None):
    """aiohttp's own errors (bad framing, oversized heads …) in the OpenAI shape, logged
    quietly; the connection is closed after it, as aiohttp does."""
    self.log_exception("bad request", exc_info=exc)
    text = (message or (str(exc) if exc is not None else "") or "bad request")[:300]
    kind = "invalid_request_error" if status < 500 else "api_error"
    answer = web.Response(status=status, body=apis.error_body(text, kind, status),
                          content_type=_JSON)
    answer.force_close()
    return answer


def _in_shape(request: web.Request, answer: web.StreamResponse) -> web.StreamResponse:
    """``answer``, an error of the router's own in Anthropic's shape on Anthropic's paths."""
    if isinstance(answer, _Refusal) and rules.PATHS.get(request.path) is rules.Api.ANTHROPIC:
        answer.body = apis.anthropic_error_body(answer.message, answer.status)
    return answer


def _parse(raw: bytes) -> dict | str:
    """The body as a JSON object naming a ``model``, or what is wrong with it."""
    try:
        body = json.loads(raw)
    except RecursionError:
        return "the body's JSON is nested too deeply"
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "the body must be a JSON object naming a `model`"
    return body


def _safe_headers(exc: web.HTTPException) -> dict[str, str]:
    return {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
