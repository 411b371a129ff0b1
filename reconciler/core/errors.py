"""Problems and the exception tree (PURE).

Expected failures are values: a manifest problem is a ``Problem`` (file, line,
JSON path, message), collected and reported all at once, never raised one at
a time; an action the executor refuses is a ``Refusal`` in its ``Outcome``; a
probe that fails is a ``ProbeAnswer``. Exceptions are for bugs and for
conditions that end a command. This is the whole tree, as raised::

    ReconcilerError         base of everything raised on purpose
    ├── StateError          the state directory, its store or its lock file is
    │   │                   unusable (store.Store, lock.Lock)
    │   └── LockHeld        another reconciler holds the lock (lock.Lock.acquire)
    ├── PlatformError       RECONCILER_PLATFORM names no implementation this system
    │                       can run (platform.choose)
    └── RevisionError       a git revision's manifests cannot be read (gitrev)

``cli.main`` catches ``ReconcilerError`` by class and turns it into one line
on stderr and exit code 1; anything else that escapes is a bug and keeps its
traceback.
"""

from __future__ import annotations

import re
from typing import Iterable

import attrs

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
#: What never reaches a terminal raw: C0 controls but the line break, DEL, C1 controls.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
#: What JSON leaves raw of those (it escapes C0 itself; not DEL, nor C1 with ensure_ascii off).
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` for a terminal (§1.5): every control character but the line break (C0, DEL,
    C1) written as an escape (``\\x1b[2J``, ``\\x9b``), so text from a manifest never moves
    an operator's cursor or clears the screen. Everything else is left as it is."""
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def shown_json(text: str) -> str:
    """A JSON document for a terminal: DEL and C1 in its strings escaped as ``\\u009b``
    (JSON escapes C0 itself); still the same JSON value."""
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def json_path(parts: Iterable[str | int]) -> str:
    """``("spec", "shards", 0, "path")`` → ``$.spec.shards[0].path``.

    Keys that are not identifier-like are written ``["…"]`` so a key with a
    dot or a space cannot be mistaken for two steps; a control character in
    a key is written as an escape (``["pool\\n"]``), never sent raw to a terminal.
    """
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            out += f".{part}"
        else:
            out += f'["{_escaped(part)}"]'
    return out


def _escaped(key: str) -> str:
    """``key`` inside ``["…"]``: quotes and backslashes escaped, and every character that is
    not printable (C0, DEL, C1 controls and the like) written as an escape, never raw."""
    return "".join(
        "\\" + c if c in '"\\' else c if c.isprintable()
        else c.encode("unicode_escape").decode("ascii")
        for c in key)


@attrs.frozen(kw_only=True, order=True)
class Problem:
    """One problem with the manifests, where it was found.

    ``line`` is 1-based; 0 means "the file as a whole" (unreadable, too big).
    Problems sort by file, line, path, message: the order ``validate`` prints.
    """

    file: str
    line: int
    path: str = "$"
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.path}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "path": self.path, "message": self.message}


def sorted_problems(problems: Iterable[Problem]) -> tuple[Problem, ...]:
    """Sorted and without exact duplicates (two schema rules may say the same thing)."""
    return tuple(sorted(set(problems)))


class ReconcilerError(Exception):
    """Base of every exception the reconciler raises on purpose."""


class StateError(ReconcilerError):
    """The state directory, its store or its lock file cannot be used."""


class LockHeld(StateError):
    """Another reconciler holds the state directory's lock."""


class PlatformError(ReconcilerError):
    """``RECONCILER_PLATFORM`` names no implementation, or one this system cannot run."""


class RevisionError(ReconcilerError):
    """A git revision's manifests cannot be read: no checkout, no such commit, git failed."""
