"""Which program a role runs: references to Programs, checked across documents (PURE; §14).

A role's ``spec.program`` and a NodeConfig's ``serve_programs.<runtime>`` name
either a ``kind: Program`` (pinned: its files by sha256) or an absolute path
(accepted as it always was, and warned: whatever binary sits there runs).

* a name that no document declares is a problem; a Program of another runtime
  than the role's (or than the ``serve_programs`` key) is a problem;
* a path is noted as not pinned (``LoadResult.unpinned``: ``validate`` warns, with the
  command that pins it; other commands run it as they always did);
* ``spec.program`` on a role the reconciler never starts (adopted, or a runtime
  it never launches) is a warning: it is ignored;
* §1.4 the versions a role's Programs have, for its ``extra_args`` (``Versions``: read
  from the documents as written, since those checks run per document), and a warning
  for a llama.cpp Program of a build with no flag table of its own (``table_warning``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from reconciler.core.desired import ProgramSpec, Runtime, is_program_path
from reconciler.core.errors import Problem
from reconciler.manifests.documents import RoleDraft
from reconciler.manifests.yamlsafe import Document, Path
from reconciler.runtimes import spec_of, table_note


def unpinned(path: str) -> str:
    return (f"{path} is not pinned: whatever binary sits there runs; pin it with a Program "
            f"(`reconcile programs add {path}` writes one)")


@attrs.frozen(kw_only=True)
class Refs:
    problems: list[Problem]
    warnings: list[Problem]
    unpinned: list[Problem]  # paths: `validate` warns that they are not pinned


def check(drafts: Sequence[RoleDraft], nodes: Sequence[Document | None],
          programs: Mapping[str, ProgramSpec], declared: frozenset[str]) -> Refs:
    """Every role's ``spec.program`` and every NodeConfig's ``serve_programs``."""
    out = Refs(problems=[], warnings=[], unpinned=[])
    for draft in drafts:
        spec, doc = draft.spec, draft.doc
        if spec.program is None:
            continue
        at = ("spec", "program")
        if not spec.managed or not spec_of(spec.runtime).launched:
            why = ("an adopted role's server is started by someone else" if not spec.managed
                   else f"the reconciler never starts {spec_of(spec.runtime).title}")
            out.warnings.append(doc.problem(at, f"ignored: {why}"))
        else:
            _check(doc, at, spec.program, str(spec.runtime), programs, declared, out)
    runtimes = {str(r) for r in Runtime}
    for doc in nodes:
        if doc is None or not isinstance(doc.value, dict):
            continue
        table = (doc.value.get("spec") or {}).get("serve_programs") or {}
        for runtime, value in table.items():
            if isinstance(value, str) and runtime in runtimes:
                _check(doc, ("spec", "serve_programs", runtime), value, runtime, programs,
                       declared, out)
    return out


def _check(doc: Document, at: Path, value: str, runtime: str,
           programs: Mapping[str, ProgramSpec], declared: frozenset[str], out: Refs) -> None:
    if is_program_path(value):
        out.unpinned.append(doc.problem(at, unpinned(value)))
        return
    if value not in declared:
        out.problems.append(doc.problem(at, f"no Program named {value!r} (and not an "
                                            "absolute path)"))
        return
    program = programs.get(value)
    if program is not None and str(program.runtime) != runtime:
        out.problems.append(doc.problem(at, f"Program {value!r} serves {program.runtime}, "
                                            f"not {runtime}"))


class Versions:
    """§1.4/§14 the versions of the Programs a role may run, read from the documents as
    written (the checks run per document, before the Programs are built): its
    ``spec.program``'s, else every NodeConfig's ``serve_programs`` for its runtime (a
    path, or no entry, is None: today's table)."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.version: dict[str, str] = {}
        self.nodes: list[dict] = []
        for doc in docs:
            kind = _get(doc.value, "kind")
            if kind == "Program":
                name, version = _get(doc.value, "metadata", "name"), _get(doc.value, "spec",
                                                                           "version")
                if isinstance(name, str) and isinstance(version, str):
                    self.version[name] = version
            elif kind == "NodeConfig":
                table = _get(doc.value, "spec", "serve_programs")
                self.nodes.append(table if isinstance(table, dict) else {})

    def of(self, doc: Document, runtime: str) -> list[str | None]:
        own = _get(doc.value, "spec", "program")
        names = [own] if isinstance(own, str) else [n.get(runtime) for n in self.nodes] or [None]
        out: list[str | None] = []
        for name in names:
            version = self.version.get(name) if isinstance(name, str) else None
            if version not in out:
                out.append(version)
        return out or [None]


def table_warning(doc: Document, program: ProgramSpec) -> list[Problem]:
    """§1.4 a Program of a build with no flag table of its own: which build's judges it."""
    note = table_note(program.runtime, program.version)
    return [doc.problem(("spec", "version"), note)] if note else []


def _get(value: object, *path: str) -> object:
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value
