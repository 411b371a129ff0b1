"""Downloading one file into the node's cache, verified before use (SHELL).

The one module that imports ``httpx``.

BEHAVIOUR §1.3. ``download(job)`` fetches ``job.url`` to
``<cache>/partial/<sha256>.part`` and, only once every byte hashed to the
declared digest, renames it to ``<cache>/blobs/<sha256>`` (atomic; a partial
or failed file is never at a path a server is given).

* **Resume.** A partial file left by a dropped connection, a killed fetch or a
  killed reconciler is continued with ``Range: bytes=N-``; its N bytes are read
  once to rebuild the hash state (hashlib cannot persist it). A server that
  ignores the range (200) restarts the file from byte 0.
* **Hash while downloading.** A second thread hashes each chunk while the next
  one is received and written (``hashlib`` releases the GIL on large buffers),
  so the digest costs no second read of the download.
* **Bounds.** A declared length over the Model's size, or one byte more than
  it on the wire, aborts (the partial file is removed). A digest mismatch
  removes the file and names both digests.
* **Transport.** ``httpx`` with TLS verified; redirects followed by hand, at
  most ``MAX_REDIRECTS``, each checked by ``redirect_refusal`` (https only, no
  loop); the token only to the Hub's own origin, never in a message.
  Connection errors, 429 and 5xx are retried ``RETRIES`` times with backoff,
  each retry resuming where the file stands.
* **One fetcher per file**: an ``flock`` on the partial file; a file another
  process holds is reported ``busy``.

Why httpx and not ``huggingface_hub``: docs/behaviour.md §1.3 has the measurements.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import queue
import threading
import time
from typing import Callable

import attrs
import httpx

from reconciler.models import fetchpolicy
from reconciler.models.fetchpolicy import Failure, FileJob, Outcome

CHUNK = 1 << 20  # bytes per read from the socket (and per hash update)
RETRIES = 4  # attempts after the first, for transient failures
BACKOFF = 1.0  # seconds before the first retry; doubled each time, capped at 16
MAX_REDIRECTS = 5
TIMEOUT = httpx.Timeout(30.0, connect=10.0)

Progress = Callable[[int], None]  # called with the bytes just written


class _Abort(Exception):
    """A failure that retrying cannot fix (carries its ``Outcome``)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


class _Transient(Exception):
    """A failure worth another attempt (dropped connection, 5xx, 429)."""


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
    with httpx.Client(timeout=TIMEOUT, verify=job.verify, follow_redirects=False,
                      trust_env=False) as client:
        for attempt in range(RETRIES + 1):
            if attempt:
                sleep(min(16.0, BACKOFF * 2 ** (attempt - 1)))
            try:
                got, wire_now = _attempt(client, job, fd, progress)
                wire += wire_now
            except _Abort as abort:
                _remove(part)
                return attrs.evolve(abort.outcome, fetched=wire)
            except _Transient as exc:
                last = str(exc)
                continue
            except OSError as exc:
                _remove(part)  # a full disk: give the space back; nothing half-written stays
                return attrs.evolve(_io_failure(job, exc), fetched=wire)
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


def _attempt(client: httpx.Client, job: FileJob, fd: int,
             progress: Progress | None) -> tuple[str, int]:
    """One GET from where the partial file stands; the digest of the whole file, bytes read."""
    have = os.fstat(fd).st_size
    if have > job.size:
        os.ftruncate(fd, 0)
        have = 0
    hasher = hashlib.sha256()
    _rehash(fd, have, hasher)
    if have == job.size:
        return hasher.hexdigest(), 0
    url = job.url
    seen = [url]
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Accept-Encoding": "identity", "Range": f"bytes={have}-"}
        if job.token and fetchpolicy.same_origin(url, job.token_origin):
            headers["Authorization"] = f"Bearer {job.token}"
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.is_redirect:
                    target = str(response.url.join(response.headers.get("location", "")))
                    refusal = fetchpolicy.redirect_refusal(url, target, seen)
                    if refusal:
                        raise _Abort(Outcome(ok=False, failure=Failure.REDIRECT,
                                             detail=f"{job.label}: {refusal}"))
                    seen.append(target)
                    url = target
                    continue
                start = fetchpolicy.body_start(response.status_code,
                                               response.headers.get("content-range"),
                                               response.headers.get("content-length"),
                                               have, job.size)
                if isinstance(start, str):
                    failure = (Failure.OVERSIZE if "declared" in start else Failure.HTTP)
                    if response.status_code == 429 or response.status_code >= 500:
                        raise _Transient(f"HTTP {response.status_code}")
                    raise _Abort(Outcome(ok=False, failure=failure, detail=f"{job.label}: {start}"))
                if start == 0 and have:
                    os.ftruncate(fd, 0)
                    hasher, have = hashlib.sha256(), 0
                return _stream(response, job, fd, have, hasher, progress)
        except httpx.HTTPError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
    raise _Abort(Outcome(ok=False, failure=Failure.REDIRECT,
                         detail=f"{job.label}: more than {MAX_REDIRECTS} redirects"))


def _stream(response: httpx.Response, job: FileJob, fd: int, have: int, hasher,
            progress: Progress | None) -> tuple[str, int]:
    """Write the body at ``have`` while a second thread hashes it; bounded by ``job.size``."""
    chunks: queue.Queue = queue.Queue(maxsize=8)
    hashing = threading.Thread(target=_hash_chunks, args=(chunks, hasher), daemon=True)
    hashing.start()
    os.lseek(fd, have, os.SEEK_SET)
    read = 0
    try:
        for chunk in response.iter_raw(CHUNK):
            if have + read + len(chunk) > job.size:
                raise _Abort(Outcome(ok=False, failure=Failure.OVERSIZE,
                                     detail=f"{job.label}: the server sent more than the "
                                            f"declared {job.size} bytes; aborted"))
            chunks.put(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            read += len(chunk)
            if progress is not None:
                progress(len(chunk))
    except httpx.HTTPError as exc:
        raise _Transient(f"connection dropped after {have + read} of {job.size} bytes: "
                         f"{type(exc).__name__}") from None
    finally:
        chunks.put(None)
        hashing.join()
    if have + read < job.size:
        raise _Transient(f"connection closed after {have + read} of {job.size} bytes")
    return hasher.hexdigest(), read


def _hash_chunks(chunks: queue.Queue, hasher) -> None:
    while (chunk := chunks.get()) is not None:
        hasher.update(chunk)


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
    headers = {"Accept-Encoding": "identity"}
    if token and fetchpolicy.same_origin(url, token_origin):
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(timeout=TIMEOUT, verify=verify, follow_redirects=False,
                          trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                response = client.head(url, headers=headers)
                if response.is_redirect:
                    target = str(response.url.join(response.headers.get("location", "")))
                    if fetchpolicy.same_origin(url, target):
                        refusal = fetchpolicy.redirect_refusal(url, target, seen)
                        if refusal:
                            return refusal
                        seen.append(target)
                        url = target
                        continue
                if response.status_code >= 400:
                    code = response.headers.get("x-error-code", "")
                    return f"HTTP {response.status_code}" + (f" ({code})" if code else "")
                return {k.lower(): v for k, v in response.headers.items()} | {
                    ":status": str(response.status_code), ":url": url}
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"more than {MAX_REDIRECTS} redirects"
