"""Downloading one file into the node's cache, verified before use (SHELL).

The only module that imports ``http.client``, and the only module that imports ``ssl``
(both the standard library's).

BEHAVIOUR §1.6. ``download(job)`` fetches ``job.url`` to
``<cache>/partial/<sha256>.part`` and, only once every byte hashed to the
declared digest, renames it to ``<cache>/blobs/<sha256>`` (atomic; a partial
or failed file is never at a path a server is given).

* **Resume.** A partial file left by a dropped connection, a killed fetch or a
  killed reconciler is continued with ``Range: bytes=N-``; its N bytes are read
  once to rebuild the hash state (hashlib cannot persist it). A server that
  ignores the range (200) restarts the file from byte 0.
* **Hash while downloading.** The body is read with ``readinto`` into a small
  pool of 1 MiB buffers and written from them; a second thread hashes each
  buffer while the next one is received (``hashlib`` releases the GIL on large
  buffers), so the digest costs no second read and no copy.
* **Bounds.** A declared length over the Model's size, or one byte more than
  it on the wire, aborts (the partial file is removed). A digest mismatch
  removes the file and names both digests.
* **Transport.** ``http.client`` with TLS verified (``ssl.create_default_context``:
  the system's CAs, the host name checked); redirects followed by hand, at
  most ``MAX_REDIRECTS``, each checked by ``redirect_refusal`` (https only, no
  loop); the token only to the Hub's own origin, never in a message.
  Connection errors, 429 and 5xx are retried ``RETRIES`` times with backoff,
  each retry resuming where the file stands.
* **One fetcher per file**: an ``flock`` on the partial file; a file another
  process holds is reported ``busy``.

Why ``http.client`` and not httpx or ``huggingface_hub``: measured on loopback,
httpx reads a body 4× slower than ``readinto`` (and ``huggingface_hub`` reads
through httpx), which cannot keep up with ``curl``; docs/behaviour.md §1.6 has
the figures.

Size: one download's whole protocol (resume, hashing beside the reader, bounds,
redirects, retries, the lock): each step guards the cache, so they stay together.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import http.client
import os
import queue
import socket
import ssl
import threading
import time
from typing import Callable
from urllib.parse import urljoin, urlsplit

import attrs

from reconciler.models import fetchpolicy
from reconciler.models.fetchpolicy import Failure, FileJob, Outcome

CHUNK = 1 << 20  # bytes per buffer (per readinto, per hash update)
BUFFERS = 4  # buffers in flight between the reader and the hashing thread
RETRIES = 4  # attempts after the first, for transient failures
BACKOFF = 1.0  # seconds before the first retry; doubled each time, capped at 16
MAX_REDIRECTS = 5
TIMEOUT = 30.0  # seconds of silence on a connection
#: The socket's receive buffer (Linux doubles it: ~4 MiB of window): what a killed fetch
#: loses in flight, fetched twice on resume, is bounded by it and the server's send
#: buffer. A 4 MiB window still carries 80 MiB/s at 50 ms round trips, 400 at 10 ms.
RCVBUF = 2 << 20
_REDIRECTS = (301, 302, 303, 307, 308)
_NETWORK = (OSError, http.client.HTTPException)  # includes ssl.SSLError and timeouts

Progress = Callable[[int], None]  # called with the bytes just written


class _Abort(Exception):
    """A failure that retrying cannot fix (carries its ``Outcome``)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


class _Transient(Exception):
    """A failure worth another attempt (dropped connection, 5xx, 429)."""


class _Disk(Exception):
    """Writing the partial file failed (carries the ``OSError``)."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(str(exc))
        self.exc = exc


def download(job: FileJob, *, progress: Progress | None = None,
             sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """Fetch, verify and move ``job``'s file into the cache; never raises for the network."""
    refusal = fetchpolicy.url_refusal(job.url)
    if refusal:
        return Outcome(ok=False, failure=Failure.REFUSED, detail=f"{job.label}: {refusal}")
    blob = fetchpolicy.blob_path(job.cache, job.sha256)
    if os.path.exists(blob):
        return Outcome(ok=True, sha256=job.sha256, detail="already in the cache")
    part = fetchpolicy.partial_path(job.cache, job.sha256)
    try:
        os.makedirs(os.path.dirname(part), exist_ok=True)
        os.makedirs(os.path.dirname(blob), exist_ok=True)
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        return _io_failure(job, exc)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return Outcome(ok=False, failure=Failure.BUSY,
                           detail=f"{job.label}: another fetch of this file is running")
        return _with_retries(job, fd, part, blob, progress, sleep)
    finally:
        os.close(fd)


def _with_retries(job: FileJob, fd: int, part: str, blob: str, progress: Progress | None,
                  sleep: Callable[[float], None]) -> Outcome:
    wire = 0
    last = ""
    for attempt in range(RETRIES + 1):
        if attempt:
            sleep(min(16.0, BACKOFF * 2 ** (attempt - 1)))
        counted = [0]
        try:
            got = _attempt(job, fd, progress, counted)
        except _Abort as abort:
            _remove(part)
            return attrs.evolve(abort.outcome, fetched=wire + counted[0])
        except _Transient as exc:
            wire += counted[0]
            last = str(exc)
            continue
        except _Disk as exc:
            _remove(part)  # a full disk: give the space back; nothing half-written stays
            return attrs.evolve(_io_failure(job, exc.exc), fetched=wire + counted[0])
        except OSError as exc:  # the partial file itself (network errors are _Transient)
            return attrs.evolve(_io_failure(job, exc), fetched=wire + counted[0])
        wire += counted[0]
        if got != job.sha256:
            _remove(part)
            return Outcome(ok=False, failure=Failure.MISMATCH, sha256=got, fetched=wire,
                           detail=f"{job.label}: sha256 mismatch: the Model says "
                                  f"{job.sha256}, the download is {got}; file removed")
        try:
            os.fsync(fd)
            os.replace(part, blob)
            _fsync_dir(os.path.dirname(blob))
        except OSError as exc:
            return attrs.evolve(_io_failure(job, exc), fetched=wire)
        return Outcome(ok=True, sha256=got, fetched=wire, detail="fetched and verified")
    return Outcome(ok=False, failure=Failure.NETWORK, fetched=wire,
                   detail=f"{job.label}: gave up after {RETRIES + 1} attempts: {last}")


def _connection(url: str, verify: bool | str) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        return http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=TIMEOUT,
                                           context=context), target
    return http.client.HTTPConnection(parts.hostname or "", parts.port,
                                      timeout=TIMEOUT), target


def _request(method: str, url: str, headers: dict[str, str], verify: bool | str):
    """One request on a connection of its own: ``(connection, response)``."""
    conn, target = _connection(url, verify)
    conn.connect()
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    conn.request(method, target, headers=headers)
    return conn, conn.getresponse()


def _attempt(job: FileJob, fd: int, progress: Progress | None, counted: list[int]) -> str:
    """One GET from where the partial file stands; the digest of the whole file."""
    have = os.fstat(fd).st_size
    if have > job.size:
        os.ftruncate(fd, 0)
        have = 0
    hasher = hashlib.sha256()
    _rehash(fd, have, hasher)
    if have == job.size:
        return hasher.hexdigest()
    url = job.url
    seen = [url]
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Accept-Encoding": "identity", "Range": f"bytes={have}-",
                   "User-Agent": "reconciler"}
        if job.token and fetchpolicy.same_origin(url, job.token_origin):
            headers["Authorization"] = f"Bearer {job.token}"
        try:
            conn, response = _request("GET", url, headers, job.verify)
        except ssl.SSLCertVerificationError as exc:  # not a glitch: never retried
            raise _Abort(Outcome(ok=False, failure=Failure.REFUSED,
                                 detail=f"{job.label}: TLS certificate verify failed: "
                                        f"{exc.verify_message or exc} "
                                        f"({fetchpolicy.origin(url)[1]})")) from None
        except _NETWORK as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        try:
            if response.status in _REDIRECTS:
                target = urljoin(url, response.getheader("Location", ""))
                refusal = fetchpolicy.redirect_refusal(url, target, seen)
                if refusal:
                    raise _Abort(Outcome(ok=False, failure=Failure.REDIRECT,
                                         detail=f"{job.label}: {refusal}"))
                seen.append(target)
                url = target
                continue
            start = fetchpolicy.body_start(response.status, response.getheader("Content-Range"),
                                           response.getheader("Content-Length"), have, job.size)
            if isinstance(start, str):
                if response.status == 429 or response.status >= 500:
                    raise _Transient(f"HTTP {response.status}")
                failure = Failure.OVERSIZE if "declared" in start else Failure.HTTP
                raise _Abort(Outcome(ok=False, failure=failure, detail=f"{job.label}: {start}"))
            if start == 0 and have:
                os.ftruncate(fd, 0)
                hasher, have = hashlib.sha256(), 0
            return _stream(response, job, fd, have, hasher, progress, counted)
        finally:
            conn.close()
    raise _Abort(Outcome(ok=False, failure=Failure.REDIRECT,
                         detail=f"{job.label}: more than {MAX_REDIRECTS} redirects"))


def _stream(response, job: FileJob, fd: int, have: int, hasher, progress: Progress | None,
            counted: list[int]) -> str:
    """Write the body at ``have`` while a second thread hashes it; bounded by ``job.size``."""
    free: queue.Queue = queue.Queue()
    for _ in range(BUFFERS):
        free.put(bytearray(CHUNK))
    full: queue.Queue = queue.Queue()
    hashing = threading.Thread(target=_hash_buffers, args=(full, free, hasher), daemon=True)
    hashing.start()
    os.lseek(fd, have, os.SEEK_SET)
    left = job.size - have
    try:
        while True:
            buf = free.get()
            view = memoryview(buf)[:min(CHUNK, left + 1)]  # one byte more tells an oversend
            try:
                n = response.readinto(view)
            except _NETWORK as exc:
                free.put(buf)
                raise _Transient(f"connection dropped after {job.size - left} of {job.size} "
                                 f"bytes: {type(exc).__name__}") from None
            if not n:
                free.put(buf)
                break
            if n > left:
                free.put(buf)
                raise _Abort(Outcome(ok=False, failure=Failure.OVERSIZE,
                                     detail=f"{job.label}: the server sent more than the "
                                            f"declared {job.size} bytes; aborted"))
            chunk = view[:n]
            try:
                while chunk:
                    chunk = chunk[os.write(fd, chunk):]
            except OSError as exc:
                free.put(buf)
                raise _Disk(exc) from None
            full.put((buf, n))
            left -= n
            counted[0] += n
            if progress is not None:
                progress(n)
    finally:
        full.put(None)
        hashing.join()
    if left:
        raise _Transient(f"connection closed after {job.size - left} of {job.size} bytes")
    return hasher.hexdigest()


def _hash_buffers(full: queue.Queue, free: queue.Queue, hasher) -> None:
    while (item := full.get()) is not None:
        buf, n = item
        hasher.update(memoryview(buf)[:n])
        free.put(buf)


def _rehash(fd: int, length: int, hasher) -> None:
    """Feed the first ``length`` bytes of the partial file to ``hasher`` (a resume)."""
    os.lseek(fd, 0, os.SEEK_SET)
    left = length
    while left:
        block = os.read(fd, min(CHUNK * 4, left))
        if not block:
            raise _Transient("the partial file shrank while resuming")
        hasher.update(block)
        left -= len(block)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _io_failure(job: FileJob, exc: OSError) -> Outcome:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Outcome(ok=False, failure=Failure.NO_SPACE,
                       detail=f"{job.label}: no space left in the cache {job.cache}; "
                              "the partial file was removed")
    return Outcome(ok=False, failure=Failure.IO, detail=f"{job.label}: {exc.strerror or exc}")


def metadata(url: str, *, token: str | None = None, token_origin: str = "",
             verify: bool | str = True) -> dict[str, str] | str:
    """The headers of a HEAD of ``url`` (the Hub's file metadata), or why there are none.

    As ``huggingface_hub.get_hf_file_metadata`` does: redirects that stay on the
    same origin are followed (a renamed repository); a redirect to another host
    (the CDN) is not: the metadata is on that answer, and the token stays home.
    """
    refusal = fetchpolicy.url_refusal(url)
    if refusal:
        return refusal
    seen = [url]
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Accept-Encoding": "identity", "User-Agent": "reconciler"}
        if token and fetchpolicy.same_origin(url, token_origin):
            headers["Authorization"] = f"Bearer {token}"
        try:
            conn, response = _request("HEAD", url, headers, verify)
        except _NETWORK as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            found = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        if response.status in _REDIRECTS:
            target = urljoin(url, found.get("location", ""))
            if fetchpolicy.same_origin(url, target):
                refusal = fetchpolicy.redirect_refusal(url, target, seen)
                if refusal:
                    return refusal
                seen.append(target)
                url = target
                continue
        elif response.status >= 400:
            code = found.get("x-error-code", "")
            return f"HTTP {response.status}" + (f" ({code})" if code else "")
        return found | {":status": str(response.status), ":url": url}
    return f"more than {MAX_REDIRECTS} redirects"
