"""Manifest text → a validated ``Desired``, or every problem at once (PURE; BEHAVIOUR §1).

``load`` takes ``(file name, bytes)`` pairs — reading files is the shell's
job (``sources.py``) — and runs four stages, each on what the previous
stage let through, collecting problems instead of stopping at the first:

1. ``yamlsafe.parse``: UTF-8, size, YAML syntax, duplicate keys, alias bombs;
2. ``kind`` dispatch and ``schemacheck.check`` against ``schemas/<kind>``,
   plus what the runtime's declaration allows (``runtimes/``): its
   ``extra_args`` (``extra_args.check``) and ``mode: managed``;
3. ``documents``: typed values and the per-document rules a schema cannot say;
4. duplicate names (a NodeConfig's is its node's), and ``crosscheck.assemble``:
   references, formats, and every node's ports, collisions and budget
   (``nodecheck``), into a ``Fleet``; the Rollouts' checks across documents
   (``rolloutdoc.check``, §13).

``desired`` is this node's share of the fleet (``fleet.desired_for``): the
node ``node`` chooses, or, without a choice, the one node of a set with at
most one NodeConfig. It is ``None`` whenever there is any problem: an invalid
manifest set must never drive an action.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from typing import Any, Mapping, Sequence

import attrs

from reconciler.manifests import documents, extra_args, fleet as fleets, nodedoc, programrefs
from reconciler.manifests import rolloutdoc, yamlsafe
from reconciler.runtimes import spec_of
from reconciler.manifests.crosscheck import Declared, assemble
from reconciler.manifests.documents import RoleDraft
from reconciler.manifests.roleextras import RepoFiles
from reconciler.core.errors import Problem, sorted_problems
from reconciler.core.desired import Desired, ModelSpec, NodeConfig, ProgramSpec, Runtime
from reconciler.core.rollouts import Rollout
from reconciler.manifests.fleet import Fleet, NodeChoice
from reconciler.manifests.schemata import KINDS
from reconciler.manifests.yamlsafe import Document


@attrs.frozen(kw_only=True)
class LoadResult:
    """What ``load`` found: the desired state, or the problems that prevent it."""

    desired: Desired | None  # this node's share; None: problems, or not a member
    problems: tuple[Problem, ...] = ()  # sorted by file, line, path
    fleet: Fleet | None = None  # the whole set, every node (None: problems)
    warnings: tuple[Problem, ...] = ()  # only reported when there are no problems
    counts: Mapping[str, int] = attrs.field(factory=dict, hash=False)  # kind → documents
    #: §14 serve programs given as paths: `validate` warns that they are not pinned (kept
    #: apart from ``warnings``: a path is still a valid, if unpinned, way to run a server).
    unpinned: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        """``7 documents: 2 Model, 4 InferenceSpec, 1 NodeConfig``."""
        total = sum(self.counts.values())
        head = f"{total} document{'' if total == 1 else 's'}"
        parts = [f"{self.counts[k]} {k}" for k in KINDS if self.counts.get(k)]
        return head + (": " + ", ".join(parts) if parts else "")


def load(files: Sequence[tuple[str, bytes]], *, schema_checked: bool = False,
         node: NodeChoice | None = None, repo_files: RepoFiles | None = None) -> LoadResult:
    """Parse and validate a whole manifest set. Never raises on bad input.

    ``node``: which node this is (§10); ``desired`` is then its share, or
    None when no NodeConfig is this node's (``member`` says which).

    ``repo_files``: the repository files roles' ``extra_args`` name, read by the
    shell (``roleextras.RepoFiles``); None: such a flag is a problem.

    ``schema_checked``: these exact bytes already passed the schemas (the
    shell remembers digests of sets that loaded cleanly), so the JSON Schema
    stage is skipped. Every other stage still runs. (Without it, a clean set
    passes ``schemafast``'s compiled checks and never imports jsonschema.)
    """
    with _collector_paused():
        return _load(files, schema_checked=schema_checked, node=node, repo_files=repo_files)


@contextlib.contextmanager
def _collector_paused():
    """No cyclic garbage collection while loading.

    A fleet repository of 10,000 nodes is millions of new objects (nodes,
    values, lines, problems' records), all alive until the load is done:
    Python's collector, triggered by allocations, walked them again and again
    for nothing (a fifth of the load's time). It is on again after, as it was.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load(files: Sequence[tuple[str, bytes]], *, schema_checked: bool,
          node: NodeChoice | None, repo_files: RepoFiles | None) -> LoadResult:
    if not schema_checked:
        from reconciler.manifests import schemacheck
    problems: list[Problem] = []
    docs: list[Document] = []
    for name, data in files:
        parsed, found = yamlsafe.parse(name, data)
        docs += parsed
        problems += found
    counts: Counter[str] = Counter()
    named: list[tuple[str, str, Document]] = []
    valid: list[tuple[str, Document]] = []
    versions = programrefs.Versions(docs)
    for doc in docs:
        kind, found = _kind(doc)
        problems += found
        if kind is None:
            continue
        counts[kind] += 1
        name = _get(doc.value, "metadata", "name")
        if isinstance(name, str):
            named.append((kind, name, doc))
        if doc.broken:
            continue  # its YAML problems are reported; schema messages would only echo them
        found = [] if schema_checked else schemacheck.check(
            doc, kind, skip=_CODE_CHECKED.get(kind, ()))
        if kind == "InferenceSpec":
            found += _extra_args(doc, versions) + _mode(doc)
        problems += found
        if not found:
            valid.append((kind, doc))
    dropped, found = _duplicates(named)
    problems += found
    implicit = node.name if node is not None else ""
    whole, found, warnings, unpinned = _build(
        [(k, d) for k, d in valid if id(d) not in dropped], named, implicit, repo_files)
    problems += found
    if problems:
        return LoadResult(desired=None, problems=sorted_problems(problems), counts=dict(counts))
    if node is not None:
        mine = fleets.choose(whole, node)
    else:  # no choice: the one node of a single-node set
        mine = whole.nodes[0] if len(whole.nodes) == 1 else (
            fleets.implicit_node() if not whole.nodes else None)
    desired = fleets.desired_for(whole, mine) if mine is not None else None
    return LoadResult(desired=desired, fleet=whole, warnings=sorted_problems(warnings),
                      counts=dict(counts), unpinned=sorted_problems(unpinned))


#: Paths a schema also describes but code checks with better messages.
_CODE_CHECKED = {"InferenceSpec": (("spec", "serve", "extra_args"), ("spec", "env"))}


def _get(value: Any, *path: str) -> Any:
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


def _kind(doc: Document) -> tuple[str | None, list[Problem]]:
    if not isinstance(doc.value, dict):
        what = "a list" if isinstance(doc.value, list) else repr(doc.value)[:40]
        return None, [doc.problem((), "a document must be a mapping with apiVersion, kind, "
                                      f"metadata and spec, not {what}")]
    kind = doc.value.get("kind")
    if kind in KINDS:
        return kind, []
    choices = ", ".join(KINDS)
    if kind is None:
        return None, [doc.problem((), f"missing required key 'kind' (one of {choices})")]
    return None, [doc.problem(("kind",), f"must be one of {choices}, not {kind!r}")]


def _extra_args(doc: Document, versions: programrefs.Versions) -> list[Problem]:
    args = _get(doc.value, "spec", "serve", "extra_args")
    runtime = _get(doc.value, "spec", "runtime")
    if not isinstance(args, list) or runtime not in [r.value for r in Runtime]:
        return []
    path = ("spec", "serve", "extra_args")
    on_devices = _get(doc.value, "spec", "placement", "devices") is not None
    found: dict[tuple, Problem] = {}  # each build's problems, once each
    for version in versions.of(doc, runtime):
        for i, message in extra_args.check(Runtime(runtime), args, on_devices, version):
            at = path if i is None else path + (i,)
            found.setdefault((at, message), doc.problem(at, message))
    return list(found.values())


def _mode(doc: Document) -> list[Problem]:
    """``mode: managed`` on a runtime with nothing to manage (no process, no models)."""
    runtime = _get(doc.value, "spec", "runtime")
    if _get(doc.value, "spec", "mode") != "managed" or runtime not in [r.value for r in Runtime]:
        return []
    rt = spec_of(Runtime(runtime))
    if rt.managed:
        return []
    return [doc.problem(("spec", "mode"), f"{runtime} roles cannot be managed: the reconciler "
                        f"never launches {rt.title} and loads no models on them; "
                        "use mode: adopted to observe one")]


def _duplicates(named: Sequence[tuple[str, str, Document]]) -> tuple[set[int], list[Problem]]:
    """Second and later documents of one kind and name (a NodeConfig's name is its node's)."""
    first: dict[tuple[str, str], Document] = {}
    dropped: set[int] = set()
    out: list[Problem] = []
    for kind, name, doc in named:
        seen = first.setdefault((kind, name), doc)
        if seen is not doc:
            dropped.add(id(doc))
            out.append(doc.problem(("metadata", "name"), f"duplicate {kind} name {name!r} "
                                   f"(first at {seen.file}:{seen.line})"))
    return dropped, out


def _build(valid: Sequence[tuple[str, Document]], named: Sequence[tuple[str, str, Document]],
           implicit: str, repo_files: RepoFiles | None
           ) -> tuple[Fleet, list[Problem], list[Problem], list[Problem]]:
    problems: list[Problem] = []
    models: dict[str, ModelSpec] = {}
    programs: dict[str, ProgramSpec] = {}
    drafts: list[RoleDraft] = []
    nodes: list[tuple[NodeConfig, Document]] = []
    rollouts: list[tuple[Rollout, Document]] = []
    tables: list[Problem] = []  # §1.4 Programs of a build without its own flag table
    for kind, doc in valid:
        if kind == "Model":
            model, found = documents.model_spec(doc)
            if model is not None:
                models[model.name] = model
        elif kind == "Program":
            program, found = documents.program_spec(doc)
            if program is not None:
                programs[program.name] = program
                tables += programrefs.table_warning(doc, program)
        elif kind == "InferenceSpec":
            draft, found = documents.role_draft(doc, repo_files)
            if draft is not None:
                drafts.append(draft)
        elif kind == "Rollout":  # §13
            rollout, found = rolloutdoc.rollout_spec(doc)
            if rollout is not None:
                rollouts.append((rollout, doc))
        else:
            config, found = nodedoc.node_config(doc)
            if config is not None:
                nodes.append((config, doc))
        problems += found
    declared = Declared(models=frozenset(n for k, n, _ in named if k == "Model"),
                        roles=frozenset(n for k, n, _ in named if k == "InferenceSpec"),
                        programs=frozenset(n for k, n, _ in named if k == "Program"))
    whole, found, warnings = assemble(drafts, models, nodes, declared, implicit=implicit,
                                      programs=programs)
    if rollouts:  # §13
        rollouts.sort(key=lambda pair: pair[0].name)
        more, warned = rolloutdoc.check(rollouts, declared.roles, whole.nodes)
        found, warnings = found + more, warnings + warned
        whole = attrs.evolve(whole, rollouts=tuple(r for r, _ in rollouts))
    refs = programrefs.check(drafts, [d for _, d in nodes], programs, declared.programs)
    return (whole, problems + found + refs.problems, warnings + refs.warnings + tables,
            refs.unpinned)

