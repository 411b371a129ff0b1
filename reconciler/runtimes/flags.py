"""The flag vocabulary: what one command-line flag of a launched server is (PURE).

Every flag of a launched server's real ``--help`` is in its runtime's table
(``llamacpp_flags.py``, ``mlx_lm_flags.py``), with all its spellings, the type
of its value and exactly one ``FlagClass`` that says what the reconciler does
with it in ``spec.serve.extra_args`` (BEHAVIOUR §1.4):

- ``OWNED``: the reconciler sets it from a field (``instead`` names it);
- ``WEIGHTS``: a weight file, written as a Model reference (``instead``);
- ``NETWORK``: reaches the network or downloads; refused (``instead``: a Model
  with a ``source``, or what else to do);
- ``FILE``: a file read at start: a path relative to the manifest's own
  directory inside the manifests repository; its content is part of the
  launch, and the server reads a copy in its instance directory;
- ``EXPECTS``: would change what the reconciler expects of the server (where
  it answers, what it serves, that it keeps running); refused, ``instead`` says why;
- ``DEVICE``: device placement; allowed, its value type-checked, for now;
- ``ALLOWED``: everything else; allowed, its value type-checked.

``FlagTable.find(spelling)`` finds a flag as the server would (llama-server
reads ``_`` as ``-`` in a ``--`` flag; ``runtimes.lookup(runtime, spelling)`` asks
a runtime's table); ``split(table, entry)`` cuts a ``--flag=value`` entry in two.
This module imports no other of ``runtimes/``: the registry imports it through
the runtime modules (the import test keeps the package free of cycles). A table is checked against the real server's
``--help`` in both directions (``tests/manifests/test_flag_tables.py``).
"""

from __future__ import annotations

import enum
import json
import re
from typing import Iterable, Iterator, Mapping

import attrs

from reconciler.core.desired import RoleSpec


class ValueType(enum.StrEnum):
    NONE = "none"  # a switch: no value follows
    INT = "int"  # an integer (``choices``: words also accepted, e.g. ``auto``)
    FLOAT = "float"  # a number
    ENUM = "enum"  # one of ``choices``
    LIST = "list"  # comma-separated items (each one of ``choices`` when given)
    TEXT = "text"  # free text: one argv element
    JSON = "json"  # a JSON document
    FILE = "file"  # a path to a file


class FlagClass(enum.StrEnum):
    OWNED = "owned"
    WEIGHTS = "weights"
    NETWORK = "network"
    FILE = "file"
    EXPECTS = "expects"
    DEVICE = "device"
    ALLOWED = "allowed"


#: Classes whose flags never reach a server through ``extra_args``.
REFUSED = frozenset({FlagClass.OWNED, FlagClass.WEIGHTS, FlagClass.NETWORK, FlagClass.EXPECTS})

#: A value is one argv element, never a shell word; these bound it (BEHAVIOUR §1.4).
MAX_VALUE_CHARS = 4096
MAX_ENTRIES = 128


@attrs.frozen(kw_only=True)
class Flag:
    """One flag of a server: its spellings, its value, and what the reconciler does with it."""

    spellings: tuple[str, ...]
    value: ValueType = ValueType.NONE
    cls: FlagClass = FlagClass.ALLOWED
    instead: str = ""  # OWNED/WEIGHTS/NETWORK/EXPECTS: what to write instead, or why not
    choices: tuple[str, ...] = ()
    count: int = 1  # how many values follow (llama-server's layer range takes 2)

    @property
    def takes_value(self) -> bool:
        return self.value is not ValueType.NONE

    @property
    def arity(self) -> int:
        return self.count if self.takes_value else 0

    @property
    def name(self) -> str:
        """The longest ``--`` spelling, for messages."""
        long = [s for s in self.spellings if s.startswith("--")] or list(self.spellings)
        return max(long, key=len)


def flag(spellings: str, value: ValueType = ValueType.NONE, cls: FlagClass = FlagClass.ALLOWED,
         instead: str = "", choices: Iterable[str] = (), count: int = 1) -> Flag:
    """A ``Flag`` from space-separated spellings (the tables' shorthand)."""
    return Flag(spellings=tuple(spellings.split()), value=value, cls=cls, instead=instead,
                choices=tuple(choices), count=count)


@attrs.frozen(eq=False)
class FlagTable(Mapping[str, Flag]):
    """``spelling → Flag`` for one server; every spelling belongs to one flag."""

    flags: tuple[Flag, ...]
    #: llama-server reads ``--a_b`` as ``--a-b``; argparse does not.
    underscores: bool = False
    #: Spellings the server does not know that real command lines carry → what to
    #: write instead (messages only).
    hints: Mapping[str, str] = attrs.field(factory=dict)
    #: The build whose ``--help`` it is (``b11434``; empty: not versioned), for messages.
    version: str = ""
    #: The server's program name with the version (``llama-server b11434``), for messages.
    program: str = ""
    _by: dict[str, Flag] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        by: dict[str, Flag] = {}
        for f in self.flags:
            for s in f.spellings:
                if s in by:
                    raise ValueError(f"flag spelling {s} is in two entries")
                by[s] = f
        object.__setattr__(self, "_by", by)

    def __getitem__(self, spelling: str) -> Flag:
        return self._by[spelling]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by)

    def __len__(self) -> int:
        return len(self._by)

    def find(self, spelling: str) -> Flag | None:
        """The flag ``spelling`` means to the server, or None."""
        if self.underscores and spelling.startswith("--"):
            spelling = spelling.replace("_", "-")
        return self._by.get(spelling)


EMPTY = FlagTable(())


def split(table: FlagTable, entry: str) -> tuple[str, str | None]:
    """``--flag=value`` → (``--flag``, ``value``) when ``--flag`` is a spelling of ``table``
    that takes a value; anything else → (entry, None). Launched as two argv elements.

    It takes the table, not the runtime: the runtime modules call it while the registry
    (``runtimes/__init__.py``, which imports them) is still being built; a runtime's
    table is ``spec_of(runtime).flags``, and ``runtimes.lookup`` finds one spelling."""
    if entry.startswith("-") and "=" in entry:
        head, _, value = entry.partition("=")
        found = table.find(head)
        if found is not None and found.takes_value:
            return head, value
    return entry, None


_INT = re.compile(r"[-+]?[0-9]+")
_NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text) is not None


def value_problem(f: Flag, spelling: str, value: object) -> str | None:
    """Why ``value`` cannot follow ``spelling`` (one argv element, typed), or None."""
    if not isinstance(value, str):
        return f"the value of {spelling} must be a string (quote numbers: \"4\")"
    if any(c != "\t" and (c < " " or "\x7f" <= c <= "\x9f") for c in value):
        # NUL, line breaks, and every other C0/DEL/C1 control (ESC, CSI, NEL): the
        # plan prints argv, and a terminal would obey them. A tab is harmless.
        return (f"the value of {spelling} must not hold NUL, line breaks or other control "
                f"characters (C0, DEL, C1)")
    if len(value) > MAX_VALUE_CHARS:
        return f"the value of {spelling} must be at most {MAX_VALUE_CHARS} characters"
    kind = f.value
    if not value and kind is not ValueType.TEXT:
        return f"the value of {spelling} must not be empty"
    if value.startswith("-") and not is_number(value):
        takes = f" ({', '.join(f.choices)})" if f.choices and kind is ValueType.ENUM else ""
        return (f"the value {value!r} of {spelling} may start with '-' only if it is a number "
                f"(a server would read it as a flag; {spelling} takes a value{takes})")
    if kind is ValueType.INT and not (_INT.fullmatch(value) or value in f.choices):
        words = f" or one of {', '.join(f.choices)}" if f.choices else ""
        return f"the value of {spelling} must be an integer{words}, not {value!r}"
    if kind is ValueType.FLOAT and not (is_number(value) or value in f.choices):
        return f"the value of {spelling} must be a number, not {value!r}"
    if kind is ValueType.ENUM and value not in f.choices:
        return f"the value of {spelling} must be one of {', '.join(f.choices)}, not {value!r}"
    if kind is ValueType.LIST and f.choices:
        wrong = [item for item in value.split(",") if item not in f.choices]
        if wrong:
            return (f"the value of {spelling} is a comma-separated list of "
                    f"{', '.join(f.choices)}; {wrong[0]!r} is not one")
    if kind is ValueType.JSON:
        try:
            json.loads(value)
        except ValueError as e:
            return f"the value of {spelling} must be JSON ({e})"
    return None


def render(role: RoleSpec, table: FlagTable) -> tuple[str, ...]:
    """A role's ``extra_args`` as launched (``table``: its runtime's flags): ``--flag=value``
    in two elements, and each repository file's path replaced by its copy in the instance
    directory (``RepoFile``)."""
    copies = {f.index: f.copy for f in role.serve.files}
    out: list[str] = []
    for i, entry in enumerate(role.serve.extra_args):
        head, value = split(table, entry)
        if value is not None:
            out += [head, copies.get(i, value)]
        else:
            out.append(copies.get(i, entry))
    return tuple(out)
