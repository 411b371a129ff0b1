"""The ``extra_args`` checker: every entry against its runtime's flag table (PURE; BEHAVIOUR §1.4).

Each launched runtime declares a table of *every* flag of its real server
(``runtimes/flags.py``, ``llamacpp_flags.py``, ``mlx_lm_flags.py``), each in
one class. Here a role's list is read as the server would read it: an entry
must be a spelling of a flag in the table (any spelling; ``--flag=value`` is
split; prefixes are not flags); a flag that takes a value takes the next
entry; the value is type-checked (one argv element, never a shell word: any
character but NUL, line breaks and other C0/DEL/C1 controls, at most 4 KiB). Flags of the classes the
reconciler owns, writes as Model references, refuses for reaching the network
or for changing what it expects of the server, are refused with what to write
instead. A ``FILE`` flag's value is a path relative to the manifest's own
directory that stays inside the manifests repository; the loader reads it.
So no flag the table does not classify ever reaches a server's argv.
"""

from __future__ import annotations

import posixpath
from typing import Sequence

from reconciler.core.desired import Runtime
from reconciler.runtimes import flags_for, llamacpp_tables, spec_of
from reconciler.runtimes.flags import (
    MAX_ENTRIES,
    MAX_VALUE_CHARS,
    Flag,
    FlagClass,
    FlagTable,
    split,
    value_problem,
)

__all__ = ["MAX_ENTRIES", "MAX_VALUE_CHARS", "check", "file_values"]

Finding = tuple[int | None, str]  # (index into extra_args or None for the list, message)

_WHY = {
    FlagClass.OWNED: "belongs to the reconciler: set {instead}",
    FlagClass.WEIGHTS: "names weights, which come from verified Model documents: "
                       "write {instead}",
    FlagClass.NETWORK: "reaches the network, which a managed server never does: {instead}",
    FlagClass.EXPECTS: "would change what the reconciler expects of the server: {instead}",
}


def check(runtime: Runtime, args: Sequence[object], on_devices: bool = False,
          version: str | None = None) -> list[Finding]:
    """Every problem with one role's ``extra_args``; empty when they are allowed.

    ``on_devices``: the role sets ``spec.placement.devices``, so the runtime's
    device flags (``--tensor-split``, ``--main-gpu`` …) are the planner's (§7.1).
    ``version``: the version of the Program the role runs (§14), whose build's table
    judges the list (``runtimes.flags_for``); None: a path, today's table.
    """
    rt = spec_of(runtime)
    if not rt.launched and args:
        return [(None, f"{runtime} takes no extra_args: the reconciler never launches "
                       f"{rt.title}")]
    findings: list[Finding] = []
    if len(args) > MAX_ENTRIES:
        findings.append((None, f"must have at most {MAX_ENTRIES} entries"))
    owned = rt.devices.owned_flags if on_devices and rt.devices is not None else frozenset()
    table = flags_for(runtime, version)
    for i, spelling, found, values in _walk(table, runtime, args, findings):
        if owned & set(found.spellings):
            findings.append((i, f"{spelling} is set by the planner from spec.placement.devices; "
                                "remove it (or remove placement.devices to place the server "
                                "by hand)"))
            continue
        if found.cls in _WHY:
            instead = found.instead
            if table.program:  # §1.4 "removed from llama-server b11434"
                instead = instead.replace("this llama-server", f"{table.program} {table.version}")
            findings.append((i, f"{spelling} " + _WHY[found.cls].format(instead=instead)))
            continue
        for k, value in values:
            problem = value_problem(found, spelling, value)
            if problem is None and found.cls is FlagClass.FILE:
                problem = path_problem(spelling, str(value))
            if problem:
                findings.append((k, problem))
    return findings


def file_values(runtime: Runtime, args: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(index of the entry holding the value, spelling, path)`` of every FILE flag."""
    out: list[tuple[int, str, str]] = []
    for _, spelling, found, values in _walk(spec_of(runtime).flags, runtime, args, []):
        if found.cls is FlagClass.FILE:
            out += [(k, spelling, str(v)) for k, v in values]
    return out


def path_problem(spelling: str, path: str) -> str | None:
    """A repository file's path: relative, plain, and never a directory."""
    if path.startswith("/") or path.startswith("~"):
        return (f"the value of {spelling} is a path relative to this manifest's directory "
                f"inside the manifests repository, not {path!r}")
    if path.endswith("/") or posixpath.normpath(path) in (".", ".."):
        return f"the value of {spelling} must name a file, not {path!r}"
    return None


def _walk(table: FlagTable, runtime: Runtime, args: Sequence[object],
          findings: list[Finding]) -> list[tuple[int, str, Flag, list[tuple[int, object]]]]:
    """Each flag entry: (index, spelling, flag, [(index, value)]); problems of shape go
    to ``findings``."""
    out = []
    i = 0
    while i < len(args):
        entry = args[i]
        if not isinstance(entry, str):
            findings.append((i, "must be a string (quote numbers: \"4\")"))
            i += 1
            continue
        spelling, inline = split(table, entry)
        found = table.find(spelling)
        if found is None:
            findings.append((i, _unknown(runtime, table, entry)))
            i += 1
            continue
        if inline is not None:
            if found.arity != 1:
                findings.append((i, f"write {spelling} and its {found.arity} values as "
                                    "separate entries"))
            out.append((i, spelling, found, [(i, inline)]))
            i += 1
            continue
        values: list[tuple[int, object]] = []
        for k in range(i + 1, i + 1 + found.arity):
            if k >= len(args):
                findings.append((i, f"{spelling} takes {found.arity} value"
                                    f"{'' if found.arity == 1 else 's'}, but the list ends"))
                break
            values.append((k, args[k]))
        out.append((i, spelling, found, values))
        i += 1 + found.arity
    return out


def _unknown(runtime: Runtime, table: FlagTable, entry: str) -> str:
    head = entry.partition("=")[0]
    spelling = head.replace("_", "-") if table.underscores else head
    if table.program:  # §1.4 a versioned table: the refusal names the build
        base = f"{entry[:80]!r} is not a flag of {table.program} {table.version}"
        moved = llamacpp_tables.renamed(table, spelling)
        base += f" ({moved})" if moved else ""
    else:
        base = f"{entry[:80]!r} is not a {runtime} flag"
    hint = table.hints.get(spelling)
    if hint:
        return f"{base}: {hint}"
    if "=" in entry and table.find(head) is not None:
        return f"{base}: {head} takes no value"
    if entry.startswith("--") and any(s.startswith(entry) for s in table):
        return f"{base}: abbreviations are not accepted, spell the flag out"
    if not entry.startswith("-"):
        return f"{base}: a value must follow the flag it belongs to"
    return f"{base} (its --help lists every flag the reconciler knows)"
