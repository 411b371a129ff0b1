"""``status_page.listen``: the status page on a loopback port of its own (SHELL; BEHAVIOUR §11).

A node without a router still gets its page from ``reconcile watch``: a
small HTTP/1.1 server on an asyncio loop in a thread of its own, which reads
one GET request per connection (head only, at most 16 KiB) and writes
``statussite.Site``'s answer, streaming server-sent events as they come.
Each answer closes its connection. It binds only the loopback address the
NodeConfig gives (validation refuses any other).
"""

from __future__ import annotations

import asyncio
import threading

from reconciler.core import loopback
from reconciler.report.statussite import Answer, Site, key_check

_MAX_HEAD = 16384
_REASONS = {200: "OK", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            400: "Bad Request"}


class StatusServer:
    """``start()`` binds (or raises the bind error); ``close()`` stops and joins."""

    def __init__(self, host: str, port: int, site: Site, *, key: str | None = None) -> None:
        self.host, self.port, self.site, self.key = host, port, site, key
        self.address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # made by start()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="reconciler-status",
                                        daemon=True)

    def start(self) -> None:
        # Validation refused any other host; this server checks again (§5).
        if not loopback.is_loopback_host(self.host):
            raise ValueError(f"{self.host!r} is not a loopback address")
        self._loop = asyncio.new_event_loop()
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def close(self) -> None:
        if self._thread.is_alive() and self._stopping is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=10)

    def _run(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        try:
            server = await asyncio.start_server(self._connection, self.host, self.port,
                                                reuse_address=True)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self.address = tuple(server.sockets[0].getsockname()[:2])  # type: ignore[assignment]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            if len(head) > _MAX_HEAD:
                raise ValueError("head too long")
            method, target, headers = _parse(head)
            path, _, query = target.partition("?")
            got = await self.site.answer(method, path, query, headers.get("authorization"),
                                         key_ok=key_check(self.key))
            await self._write(writer, got, method == "HEAD")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, ValueError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, got: Answer, head_only: bool) -> None:
        lines = [f"HTTP/1.1 {got.status} {_REASONS.get(got.status, 'OK')}",
                 *(f"{k}: {v}" for k, v in got.headers), "Connection: close"]
        if got.chunks is None:
            lines.append(f"Content-Length: {len(got.body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if head_only:
            return
        if got.chunks is None:
            writer.write(got.body)
            await writer.drain()
            return
        try:
            async for chunk in got.chunks:
                writer.write(chunk)
                await writer.drain()
        finally:
            await got.chunks.aclose()  # type: ignore[attr-defined]


def _parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return method, target, headers
