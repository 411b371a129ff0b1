"""Sending probe requests (SHELL; the only module that imports httpx).

Every request follows the §2 hygiene: redirects are never followed, proxy
environment variables are ignored, each request opens its own connection
(a fresh client, no keep-alive), connect *and* total time are bounded by the
timeout, and bodies over 1 MiB are a transport error. Nothing here raises
for a server's behaviour: the outcome is a ``ProbeAnswer`` value.

``run_exchange`` drives a runtime module's pure exchange generator (see
``runtimes/common.py``), sending each batch of requests concurrently.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any, Awaitable, Callable

import httpx

from reconciler.runtimes.common import (
    MAX_BODY,
    ErrorKind,
    Exchange,
    ProbeAnswer,
    ProbeRequest,
    seconds,
)

_USER_AGENT = "reconciler-probe"
_TEXT_KEEP = 2000  # characters of the body kept for messages

_ssl_context: ssl.SSLContext | None = None


def _ssl() -> ssl.SSLContext:
    """One bare context for every client: we only speak plain HTTP to loopback,
    and httpx would otherwise load the CA bundle per client (~20 ms each)."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return _ssl_context


def url(host: str, port: int, path: str) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return f"http://{bracketed}:{port}{path}"


def _client(timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
        timeout=timeout,
        verify=_ssl(),
        headers={"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"},
    )


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "refused" in str(exc).lower()


async def _read_capped(response: httpx.Response) -> bytes | None:
    """The body, or None once it passes MAX_BODY (declared or actual)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_raw():
        total += len(chunk)
        if total > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(status: int, raw: bytes, latency: float) -> ProbeAnswer:
    text = raw[:_TEXT_KEEP].decode("utf-8", "replace")
    body: Any = None
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    return ProbeAnswer(status=status, body=body, text=text, latency=latency)


async def send(
    host: str, port: int, request: ProbeRequest, *, timeout: float
) -> ProbeAnswer:
    """Send one request on a new connection; never raises for the server's sake."""
    if request.max_timeout is not None:
        timeout = min(timeout, request.max_timeout)
    started = time.perf_counter()

    def failed(kind: ErrorKind, detail: str) -> ProbeAnswer:
        return ProbeAnswer(
            error=kind, error_detail=detail, latency=time.perf_counter() - started
        )

    try:
        async with asyncio.timeout(timeout):  # total time, not per read
            async with _client(timeout) as client:
                async with client.stream(
                    request.method, url(host, port, request.path), json=request.body
                ) as response:
                    raw = await _read_capped(response)
                    if raw is None:
                        return failed(ErrorKind.TOO_LARGE, "answer larger than 1 MiB")
                    return _answer(response.status_code, raw, time.perf_counter() - started)
    except (TimeoutError, httpx.TimeoutException):
        return failed(ErrorKind.TIMEOUT, f"within {seconds(timeout)}")
    except httpx.ConnectError as exc:
        if _refused(exc):
            return failed(ErrorKind.REFUSED, "connection refused")
        return failed(ErrorKind.TRANSPORT, f"cannot connect: {exc}")
    except (httpx.HTTPError, OSError) as exc:
        return failed(ErrorKind.TRANSPORT, f"{type(exc).__name__}: {exc}".rstrip(": "))
    except Exception as exc:  # a probe must never take the pass down
        return failed(ErrorKind.TRANSPORT, f"{type(exc).__name__}: {exc}".rstrip(": "))


Sender = Callable[[ProbeRequest], Awaitable[ProbeAnswer]]


async def run_exchange(exchange: Exchange, sender: Sender) -> dict[str, ProbeAnswer]:
    """Drive a pure exchange: send each yielded batch concurrently, feed the answers back."""
    try:
        batch = next(exchange)
        while True:
            answers = await asyncio.gather(*(sender(r) for r in batch))
            batch = exchange.send(tuple(answers))
    except StopIteration as done:
        return done.value


async def post_json_async(
    host: str, port: int, path: str, body: Any, *, timeout: float
) -> ProbeAnswer:
    """POST a JSON body with the probe hygiene (Ollama load/unload, deep health)."""
    return await send(
        host, port, ProbeRequest(method="POST", path=path, body=body), timeout=timeout
    )


def post_json(host: str, port: int, path: str, body: Any, *, timeout: float) -> ProbeAnswer:
    """Blocking ``post_json_async`` for callers without an event loop."""
    return asyncio.run(post_json_async(host, port, path, body, timeout=timeout))


def send_sync(host: str, port: int, request: ProbeRequest, *, timeout: float) -> ProbeAnswer:
    """Blocking ``send`` for callers without an event loop."""
    return asyncio.run(send(host, port, request, timeout=timeout))
