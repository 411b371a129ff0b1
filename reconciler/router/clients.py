"""Per-client rules of the router: API keys by name, token usage, CORS (PURE; BEHAVIOUR §9).

* ``parse_keys``: ``router.api_keys_file``, one client a line,
  ``NAME:SHA256-OF-KEY`` (64 hex digits; ``#`` comments and blank lines
  skipped); no key is ever stored in plain text. ``client_of`` finds the name
  a bearer key belongs to (the key's digest, compared in constant time);
* ``usage``: the token counts of an answer, ``(prompt, completion)``, read
  from its ``"usage": {…}`` objects (a JSON answer ends with one; a stream's
  last chunk carries it when the server sends one), the latest count of each
  kind: OpenAI's ``prompt_tokens``/``completion_tokens``, the Responses API's
  ``input_tokens``/``output_tokens`` (its ``response.completed`` event), and
  Anthropic's (``input_tokens`` plus its cache reads and writes, which it
  counts apart; a stream's ``message_start`` has the input, its
  ``message_delta`` the output); or from Ollama's
  ``prompt_eval_count``/``eval_count``;
* ``cors``: the headers of a CORS answer for an ``Origin``, when that origin
  is allowed (``router.cors_origins``, opt-in; ``*`` allows any).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Iterable

_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def parse_keys(text: str, path: str = "api_keys_file") -> dict[str, str]:
    """Digest → name; ValueError naming the line for a malformed one."""
    keys: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, digest = line.partition(":")
        digest = digest.strip().lower()
        if not _NAME.fullmatch(name.strip()) or not _HEX64.fullmatch(digest):
            raise ValueError(f"{path}:{number}: expected NAME:SHA256-OF-KEY "
                             "(a name, a colon, 64 hex digits)")
        keys[digest] = name.strip()
    if not keys:
        raise ValueError(f"{path} names no key")
    return keys


def digest(key: str | bytes) -> str:
    raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()


def client_of(token: str | None, keys: dict[str, str]) -> str | None:
    """The name whose key ``token`` is, or None (every digest compared, in constant time)."""
    if token is None:
        return None
    given = digest(token)
    found = None
    for known, name in keys.items():
        if hmac.compare_digest(given, known):
            found = name
    return found


_USAGE = re.compile(rb'"usage"\s*:\s*(\{(?:[^{}]|\{[^{}]*\})*\})')  # one nesting level
_OLLAMA = re.compile(rb'"(prompt_eval_count|eval_count)"\s*:\s*(\d+)')


#: The fields of a usage object counted as prompt tokens (summed) and completion tokens.
_PROMPT = ("prompt_tokens", "input_tokens", "cache_read_input_tokens",
           "cache_creation_input_tokens")
_COMPLETION = ("completion_tokens", "output_tokens")


def usage(tail: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens: each the latest count of its kind in the usage objects of
    ``tail`` (an Anthropic stream gives the input and the output in two), or None."""
    prompt = completion = None
    for found in _USAGE.findall(tail):
        try:
            data = json.loads(found)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        counts = [data.get(k) for k in _PROMPT]
        if any(isinstance(n, int) for n in counts):
            prompt = sum(n for n in counts if isinstance(n, int))
        done = [data.get(k) for k in _COMPLETION]
        if any(isinstance(n, int) for n in done):
            completion = sum(n for n in done if isinstance(n, int))
    if prompt is not None or completion is not None:
        return prompt or 0, completion or 0
    counts = dict(_OLLAMA.findall(tail))
    if counts:
        return int(counts.get(b"prompt_eval_count", 0)), int(counts.get(b"eval_count", 0))
    return None


#: What a preflight may ask for: the methods the router serves, any request header.
_METHODS = "GET, POST, OPTIONS"


def allowed(origin: str | None, origins: Iterable[str]) -> bool:
    allowed_origins = tuple(origins)
    return origin is not None and (origin in allowed_origins or "*" in allowed_origins)


def cors(origin: str | None, origins: Iterable[str], *, preflight: bool = False,
         asked: str | None = None) -> dict[str, str]:
    """The CORS headers for ``origin`` ({} when it is not allowed)."""
    if not allowed(origin, origins):
        return {}
    assert origin is not None
    headers = {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
    if preflight:
        headers.update({"Access-Control-Allow-Methods": _METHODS,
                        "Access-Control-Allow-Headers": asked or "authorization, content-type",
                        "Access-Control-Max-Age": "600"})
    return headers
