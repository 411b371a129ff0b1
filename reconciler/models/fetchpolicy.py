"""What a fetch may do, decided without IO (PURE): URLs, redirects, ranges, cache paths.

BEHAVIOUR §1.6. ``fetch.py`` asks these before every request and answer:

* ``url_refusal``: a URL is https, or plain http to a loopback mirror; never
  with a user:password.
* ``redirect_refusal``: a redirect goes to an allowed URL, never from https
  down to http, never back to a URL already visited (a loop).
* ``same_origin``: the token goes only to the Hub's own scheme, host and port.
* ``body_start``: where the body of an answer to ``Range: bytes=N-`` starts
  (N for a 206 that continues the file, 0 for a 200 that ignored the range),
  or why it is refused (a declared length over the Model's size, a range that
  does not continue the file, an error status).
"""

from __future__ import annotations

import enum
import re

import attrs

from reconciler.core import loopback

_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<auth>[^/?#]*)(?P<rest>.*)$")
_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_PORTS = {"http": 80, "https": 443}


class Failure(enum.StrEnum):
    MISMATCH = "mismatch"  # the bytes hash to another digest: refused until a new generation
    OVERSIZE = "oversize"  # more bytes than the Model declares
    REDIRECT = "redirect"  # to http, to a refused URL, or a loop
    HTTP = "http"  # an error status that retrying cannot fix (404, 401, …)
    NETWORK = "network"  # retries exhausted
    NO_SPACE = "no_space"
    IO = "io"
    BUSY = "busy"  # another process holds this file's lock
    TOKEN = "token"  # the token file cannot be read
    REFUSED = "refused"  # the URL itself is not allowed


#: Failures that stay until a new generation or ``reconcile models fetch --retry``.
STICKY = frozenset({Failure.MISMATCH, Failure.OVERSIZE})


@attrs.frozen(kw_only=True)
class FileJob:
    """One file to fetch into the cache."""

    url: str
    sha256: str
    size: int
    cache: str
    label: str = ""  # "qwen: qwen.gguf", for messages
    token: str | None = attrs.field(default=None, repr=False)  # never printed
    token_origin: str = ""  # the Hub endpoint: the only origin the token is sent to
    verify: bool | str = True  # TLS: True, or a CA bundle path (tests only)


@attrs.frozen(kw_only=True)
class Outcome:
    ok: bool
    sha256: str = ""  # the digest of what was downloaded (names a mismatch)
    fetched: int = 0  # bytes read from the network by this call
    failure: Failure | None = None
    detail: str = ""


def blob_path(cache: str, sha256: str) -> str:
    return f"{cache.rstrip('/')}/blobs/{sha256}"


def partial_path(cache: str, sha256: str) -> str:
    return f"{cache.rstrip('/')}/partial/{sha256}.part"


def origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of a URL, lower-cased, with the default port."""
    m = _URL.match(url)
    if m is None:
        return None
    scheme = m["scheme"].lower()
    hostport = m["auth"].rsplit("@", 1)[-1].lower()
    port_text = ""
    if hostport.startswith("["):
        host, _, tail = hostport.partition("]")
        host += "]"
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = hostport.partition(":")
    if port_text and not port_text.isdigit():
        return None
    return scheme, host, int(port_text) if port_text else _PORTS.get(scheme, 0)


def same_origin(url: str, other: str) -> bool:
    mine = origin(url)
    return mine is not None and mine == origin(other)


def url_refusal(url: str) -> str | None:
    """Why a URL may not be fetched from, or None."""
    m = _URL.match(url)
    where = origin(url)
    if m is None or where is None or not where[1]:
        return f"not a URL: {url!r}"
    if "@" in m["auth"]:
        return "a URL with a user or password is refused: use hf_token_file"
    scheme, host, _ = where
    if scheme == "https":
        return None
    if scheme == "http" and loopback.is_loopback(host):  # the one loopback rule (§5)
        return None
    return f"{scheme}:// to {host} is refused: only https (plain http only to loopback)"


def redirect_refusal(current: str, target: str, seen: list[str]) -> str | None:
    """Why a redirect from ``current`` to ``target`` is not followed, or None."""
    if target in seen:
        return f"redirect loop: {target} was already visited"
    mine, theirs = origin(current), origin(target)
    if mine is not None and theirs is not None and mine[0] == "https" and theirs[0] != "https":
        return f"redirect from https to {theirs[0]}:// ({theirs[1]}) is refused"
    refusal = url_refusal(target)
    return f"redirect refused: {refusal}" if refusal else None


def body_start(status: int, content_range: str | None, content_length: str | None,
               have: int, size: int) -> int | str:
    """Where the body starts in the file, or why the answer is refused."""
    if status == 206:
        m = _RANGE.match((content_range or "").strip())
        if m is None or int(m[1]) != have:
            return f"a range answer that does not continue the file at byte {have}: " \
                   f"{content_range!r}"
        if m[3] != "*" and int(m[3]) > size:
            return f"the server declared {m[3]} bytes, the Model says {size}; aborted"
        return have
    if status == 200:
        if content_length is not None and content_length.isdigit() and int(content_length) > size:
            return f"the server declared {content_length} bytes, the Model says {size}; aborted"
        return 0
    if status == 416 and have == size:
        return have
    return f"HTTP {status}"
