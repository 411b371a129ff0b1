"""Sizes, durations and plain tokens: parsing and formatting (PURE).

Sizes: an int of bytes, or a string with a decimal (``kB MB GB TB``) or binary
(``KiB MiB GiB TiB``) unit: ``"9.7GB"`` is 9_700_000_000, ``"8GiB"`` is
8·2³⁰. Durations: a number of seconds, or ``"2s"``, ``"5m"``, ``"1h30m"``,
``"250ms"``. Both parsers raise ``ValueError`` with a message fit for an
operator; the manifest loader turns it into a problem at a path.
"""

from __future__ import annotations

import math
import re

MAX_SIZE = 4 * 2**40  # 4 TiB: BEHAVIOUR §1.2

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}

PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}$")


def is_plain_token(value: object) -> bool:
    """1–64 chars, first ASCII alphanumeric, then alphanumerics or ``. _ + : -``; no ``..``."""
    return isinstance(value, str) and bool(PLAIN_TOKEN.fullmatch(value)) and ".." not in value


def parse_size(value: object) -> int:
    """Bytes from an int or a size string; ``ValueError`` when malformed or too large."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '9.7GB' or '8GiB'")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else ""
        if not m or unit not in _SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size (use bytes, or e.g. '9.7GB', '512MiB')")
        size = math.floor(float(m.group(1)) * _SIZE_UNITS[unit])
    else:
        raise ValueError("a size is a number of bytes or a string like '9.7GB' or '8GiB'")
    if size < 0:
        raise ValueError("a size cannot be negative")
    if size > MAX_SIZE:
        raise ValueError(f"{value!r} is more than 4 TiB")
    return size


def parse_duration(value: object, *, allow_negative: bool = False) -> float:
    """Seconds from a number or a duration string like ``"1h30m"``."""
    if isinstance(value, bool):
        raise ValueError("a duration is seconds or a string like '2s', '5m', '1h30m'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sign = 1.0
        if allow_negative and text.startswith("-"):
            sign, text = -1.0, text[1:]
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"{value!r} is not a duration (use e.g. '2s', '5m', '1h30m')")
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
        seconds *= sign
    else:
        raise ValueError("a duration is seconds or a string like '2s', '5m', '1h30m'")
    if not math.isfinite(seconds) or (seconds < 0 and not allow_negative):
        raise ValueError(f"{value!r} is not a non-negative duration")
    return seconds


def format_size(size: int) -> str:
    """Decimal GB with one decimal for big sizes, as in the ledger messages."""
    for unit, factor in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


def format_duration(seconds: float) -> str:
    """``8s``, ``1m30s``, ``250ms``: short, for plan lines."""
    if seconds < 0:
        return "forever"
    if seconds < 1 and seconds > 0:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m) else "")
    return out
