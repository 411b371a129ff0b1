"""What the router answers and reads in each API's own terms (PURE; BEHAVIOUR §9).

The router speaks OpenAI's API (chat and text completions, embeddings,
rerank, the Responses API), Anthropic's Messages API (``/v1/messages``,
``/v1/messages/count_tokens``) and Ollama's own; ``rules.PATHS`` says which
path is which. Here is what differs between them:

* ``error_body``: the OpenAI-style error ``{"error": {"message", "type", "code"}}``
  (OpenAI's and Ollama's paths, and any other); ``anthropic_error_body``:
  Anthropic's, ``{"type": "error", "error": {"type", "message"}}``, its type
  from the status, so its clients raise the right exception;
* the client's key: ``Authorization: Bearer`` (OpenAI's clients) or
  ``X-Api-Key`` (Anthropic's): ``credential`` reads it, ``bearer`` a bearer
  header's token; ``ambiguous`` says why a request's credential is ambiguous
  (a field given more than once, a singleton, RFC 9110 §11.6.2; or the two
  fields naming different keys), refused 400.

Token usage in each API's shape is read by ``clients.usage``.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping


def error_body(message: str, kind: str, code: int | str) -> bytes:
    """OpenAI's error shape: ``{"error": {"message", "type", "code"}}``."""
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


#: Anthropic's error type for each status the router answers; others: ``invalid_request_error``
#: below 500, ``api_error`` from 500 (Anthropic's ``overloaded_error`` is its 529: our 503s).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_error_body(message: str, status: int) -> bytes:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``, its
    type from the status (``_ANTHROPIC_TYPES``)."""
    kind = _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


#: The fields a client's credential may come in: ``Authorization: Bearer`` (OpenAI's
#: clients) and ``X-Api-Key`` (Anthropic's; llama-server reads both). Neither is forwarded.
_CREDENTIALS = ("authorization", "x-api-key")


def ambiguous(headers: Iterable[tuple[str, str]]) -> str | None:
    """§9 why a request's credential is ambiguous, or None: one of its fields given twice, or
    a bearer key and an ``X-Api-Key`` that differ. ``Authorization`` is a singleton field
    (RFC 9110 §11.6.2): which of two would be the client's? Taking either lets a front proxy's
    key and the client's disagree unseen."""
    seen: dict[str, str] = {}
    for key, value in headers:
        name = key.lower()
        if name in _CREDENTIALS:
            if name in seen:
                return (f"more than one `{key}` header: a request carries one credential "
                        "(RFC 9110 §11.6.2)")
            seen[name] = value
    if "x-api-key" in seen and "authorization" in seen:
        token = bearer(seen["authorization"])
        if token is not None and token != seen["x-api-key"].strip():
            return ("`Authorization: Bearer` and `X-Api-Key` name different keys: a request "
                    "carries one credential")
    return None


def credential(headers: Mapping[str, str]) -> str | None:
    """The client's key: the ``Authorization: Bearer`` token, else ``X-Api-Key``'s value."""
    token = bearer(headers.get("Authorization"))
    if token is None:
        token = (headers.get("X-Api-Key") or "").strip() or None
    return token


def bearer(header: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive), or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
