"""How llama-swap reads the text of its config (PURE): its YAML, its macro values, its commands.

* YAML as llama-swap's yaml.v3 reads it (``parse``): YAML 1.2's core schema, so only
  ``true``/``false`` are booleans — ``fa: on`` is the text ``on`` (YAML 1.1, PyYAML's default,
  would say True and the import would write ``-fa True``), ``1:30`` is text, not 90;
* a macro's value as Go's ``%v`` writes it into a command (``go_text``: ``true``, ``1`` for
  ``1.0``);
* a ``cmd`` split as llama-swap splits it (``split_cmd``): comment lines dropped, a trailing
  ``\\`` a space, then words as a POSIX shell splits them — or, on a config written for
  Windows (``is_windows``: a drive letter ``C:\\`` or an ``.exe``), as Windows splits a
  command line (llama-swap runs on Windows too, installed with winget): backslashes are path
  separators there, only double quotes quote;
* a ``cmd`` that is a shell script (``bash -c "cd /m && exec llama-server …"``): its server
  command (``unwrap_shell``), the script's other commands said, not carried.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from reconciler.manifests.translate import Note, program_of, servers

#: A Windows path in a command: a drive letter (``C:\\``, ``d:/``) or a program ending ``.exe``.
_WINDOWS = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]:[\\/]|\.exe(?![A-Za-z0-9])", re.IGNORECASE)


class ConfigLoader(yaml.SafeLoader):
    """YAML as llama-swap's yaml.v3 reads it (YAML 1.2's core schema): a plain ``on``, ``yes``,
    ``off`` or ``1:30`` is text, only ``true``/``false`` (any case form) are booleans."""


_CORE_SCHEMA = {  # YAML 1.2's core schema, as yaml.v3 resolves a plain scalar
    "tag:yaml.org,2002:bool": (r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    "tag:yaml.org,2002:int": (r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    "tag:yaml.org,2002:float": (r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789."),
}
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag in ("tag:yaml.org,2002:null",
                                                         "tag:yaml.org,2002:merge")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _tag, (_rx, _first) in _CORE_SCHEMA.items():
    ConfigLoader.add_implicit_resolver(_tag, re.compile(_rx), list(_first))


def parse(text: str | bytes) -> Any:
    """A llama-swap config's YAML, read as llama-swap reads it (``ConfigLoader``)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def go_text(value: Any) -> str:
    """A macro's value as llama-swap writes it into a command (Go's ``%v``): ``true``, ``1``
    for ``1.0``, ``0.5``; text as it stands."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def split_cmd(text: str, *, windows: bool = False) -> list[str]:
    """A ``cmd`` as llama-swap splits it: comment lines dropped, a line's trailing ``\\`` a
    space, then words — as a POSIX shell splits them, or (``windows``) as a Windows program's
    command line is split."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = " ".join(line.rstrip().removesuffix("\\") for line in lines)
    return _split_windows(joined) if windows else shlex.split(joined, comments=True)


def is_windows(commands: list[str]) -> bool:
    """Commands written for Windows: one of them names a drive (``C:\\``) or an ``.exe``."""
    return any(_WINDOWS.search(text) for text in commands)


def _split_windows(text: str) -> list[str]:
    """Words as Windows splits a command line: white space between words, ``"`` quotes (``""``
    inside quotes is one ``"``), backslashes are literal except right before a ``"`` (2n of
    them: n and a quote; 2n+1: n and a literal ``"``). A single quote is a character."""
    words: list[str] = []
    word: list[str] = []
    started = quoted = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            if j < n and text[j] == '"':
                word.append("\\" * ((j - i) // 2))
                if (j - i) % 2:
                    word.append('"')
                    j += 1
            else:
                word.append("\\" * (j - i))
            started, i = True, j
        elif c == '"':
            if quoted and text[i + 1:i + 2] == '"':
                word.append('"')
                i += 1
            else:
                quoted = not quoted
            started, i = True, i + 1
        elif c in " \t\r\n" and not quoted:
            if started:
                words.append("".join(word))
                word, started = [], False
            i += 1
        else:
            word.append(c)
            started, i = True, i + 1
    if started:
        words.append("".join(word))
    return words


def unwrap_shell(argv: list[str], notes: list[Note]) -> tuple[str, ...]:
    """``bash -c "cd /m && exec llama-server …"``: the server's command is the one carried;
    every other command of the script is said, not carried (a ``cd`` changes what a relative
    path names: never dropped silently)."""
    shells = ("sh", "bash", "zsh", "dash")
    if len(argv) < 3 or argv[0].rsplit("/", 1)[-1] not in shells or argv[1] not in ("-c", "-lc"):
        return tuple(argv)
    parts = [p.strip() for p in re.split(r"&&|\|\||;|\n", argv[2]) if p.strip()]
    servers = [p for p in parts if _names_server(p)]
    if len(servers) != 1:
        return tuple(argv)
    for part in parts:
        if part is not servers[0]:
            notes.append(Note(flag=argv[0], kept=False, what=f"the script's `{part}`: not "
                              "carried (only its server command is)"))
    return tuple(split_cmd(servers[0]))


def _names_server(command: str) -> bool:
    try:
        words = split_cmd(command)
    except ValueError:
        return False
    _, rest, _ = program_of(words)
    return bool(rest) and any(c.names(rest[0].rsplit("/", 1)[-1]) for _, c in servers())
