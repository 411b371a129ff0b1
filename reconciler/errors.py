"""Problems and the exception tree (PURE).

Expected failures are values: a manifest problem is a ``Problem`` (file, line,
JSON path, message), collected and reported all at once, never raised one at
a time. Exceptions are for bugs, for invalid input a caller chose to treat as
fatal, and for conditions that end a command::

    ReconcilerError                 base of everything raised on purpose
    ├── ManifestError               the manifest set is invalid (carries .problems)
    ├── StateError                  the state store is unusable
    │   └── LockHeld                another reconciler holds the lock
    └── GuardError                  the executor refused an action a plan asked for
                                    (a pid it does not own, a port outside the allowlist)

Commands turn these into exit code 1 and one line on stderr; none of them
should ever reach the operator as a traceback.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import attrs

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def json_path(parts: Iterable[str | int]) -> str:
    """``("spec", "shards", 0, "path")`` → ``$.spec.shards[0].path``.

    Keys that are not identifier-like are written ``["…"]`` so a key with a
    dot or a space cannot be mistaken for two steps.
    """
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}"
        else:
            escaped = part.replace("\\", "\\\\").replace('"', '\\"')
            out += f'["{escaped}"]'
    return out


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


class ManifestError(ReconcilerError):
    """The manifest set is invalid; ``problems`` says every reason."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        first = str(self.problems[0]) if self.problems else "invalid manifests"
        more = len(self.problems) - 1
        super().__init__(first + (f" (and {more} more)" if more > 0 else ""))


class StateError(ReconcilerError):
    """The state store cannot be opened, read or written."""


class LockHeld(StateError):
    """Another reconciler holds the state directory's lock."""


class GuardError(ReconcilerError):
    """The executor refused an action that breaks a safety rule."""
