"""Checks across documents, and the assembly of the ``Fleet`` (PURE; BEHAVIOUR §1.5, §10).

Runs on documents that passed the schema and their own checks. Names that a
broken document declares still count as declared, so a role pointing at a
Model with a typo in its sha256 is not also told the Model does not exist.
What depends on the node a role runs on (ports, collisions, serve programs,
budgets, placement) is checked for every node by ``nodecheck``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from reconciler.manifests import nodecheck
from reconciler.manifests.documents import RoleDraft
from reconciler.core.errors import Problem
from reconciler.core.desired import (ModelFormat, ModelSpec, NodeConfig, ProgramSpec,
                                     sorted_by_name)
from reconciler.manifests.fleet import Fleet, implicit_node
from reconciler.runtimes import SPECS, spec_of
from reconciler.manifests.yamlsafe import Document


@attrs.frozen(kw_only=True)
class Declared:
    """Every name some document declares, valid or not: kind → names."""

    models: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    programs: frozenset[str] = frozenset()


def assemble(
    drafts: Sequence[RoleDraft],
    models: Mapping[str, ModelSpec],
    nodes: Sequence[tuple[NodeConfig, Document]],
    declared: Declared,
    *,
    implicit: str = "",
    programs: Mapping[str, ProgramSpec] | None = None,
) -> tuple[Fleet, list[Problem], list[Problem]]:
    """The ``Fleet``, the cross-document problems, and warnings.

    ``implicit`` names the one node of a set without NodeConfig.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    programs = programs or {}
    for draft in drafts:
        problems += _references(draft, models, declared)
        warnings += _role_warnings(draft, declared)
    problems += _shared_model_excludes(drafts, models)
    for _, doc in nodes:
        problems += _model_roots(doc, models, declared)
    checked: list[nodecheck.Node] = list(nodes) or [(implicit_node(implicit), None)]
    found, warned = nodecheck.check(drafts, checked, models)
    fleet = Fleet(roles=tuple(sorted((d.role() for d in drafts), key=lambda r: r.spec.name)),
                  models=sorted_by_name(models.values()),
                  programs=sorted_by_name(programs.values()),
                  nodes=sorted_by_name(n for n, _ in nodes))
    return fleet, problems + found, warnings + warned


def _references(draft: RoleDraft, models: Mapping[str, ModelSpec],
                declared: Declared) -> list[Problem]:
    spec, doc = draft.spec, draft.doc
    out: list[Problem] = []
    checks = [(("spec", "model"), spec.model, "model")]
    serve = spec.serve
    for field in ("draft_model", "mmproj", "adapter"):
        if getattr(serve, field) is not None:
            checks.append((("spec", "serve", field), getattr(serve, field), field))
    for i, lora in enumerate(serve.loras):
        checks.append((("spec", "serve", "loras", i, "model"), lora.model, "LoRA adapter"))
    takes = spec_of(spec.runtime).serve_options
    for field in ("mmproj", "loras", "adapter", "api_key_file", "cache_type_k", "cache_type_v",
                  "slot_save"):
        if getattr(serve, field) not in (None, (), False) and field not in takes:
            takers = " and ".join(str(s) for s in SPECS.values() if field in s.serve_options)
            out.append(doc.problem(("spec", "serve", field),
                                   f"only {takers or 'no runtime'} takes {field}"))
    for path, name, what in checks:
        if name is None:
            continue
        if name not in declared.models:
            out.append(doc.problem(path, f"no Model named {name!r}"))
            continue
        model = models.get(name)
        if model is None:
            continue  # declared but invalid: its own problems say why
        # (The schema lets only a runtime that takes a draft name one.)
        loadable = spec_of(spec.runtime).formats
        if model.format not in loadable:
            can = " or ".join(sorted(loadable))
            what = what.replace("_", " ")
            out.append(doc.problem(path, f"{what} {name!r} is {model.format}; "
                                         f"{spec.runtime} loads only {can}"))
    raw_excludes = _raw_list(doc, "spec", "excludes")
    for i, raw in enumerate(raw_excludes):
        other = str(raw).removeprefix("role:")
        if other == spec.name:
            out.append(doc.problem(("spec", "excludes", i), "a role cannot exclude itself"))
    return out


def _raw_list(doc: Document, *path: str) -> list[object]:
    value: object = doc.value
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value if isinstance(value, list) else []


def _shared_model_excludes(drafts: Sequence[RoleDraft],
                           models: Mapping[str, ModelSpec]) -> list[Problem]:
    """Roles serving one model on one shared server cannot exclude each other (BEHAVIOUR §7).

    One model in memory is the residency of every role that names it, so such
    an exclusion could never hold while both run.
    """
    served = {}  # role → (its runtime, the model it names, host, port)
    for draft in drafts:
        spec = draft.spec
        runtime = spec_of(spec.runtime)
        name = (runtime.wanted(spec, models.get(spec.model or ""))
                if runtime.shared_endpoint and spec.model in models else None)
        if name:
            served[spec.name] = (runtime, name, spec.serve.host, spec.serve.port)
    out: list[Problem] = []
    for draft in drafts:
        mine = served.get(draft.spec.name)
        for i, raw in enumerate(_raw_list(draft.doc, "spec", "excludes") if mine else ()):
            other = str(raw).removeprefix("role:")
            theirs = served.get(other)
            if (other != draft.spec.name and mine is not None and theirs is not None
                    and mine[0] is theirs[0] and mine[2:] == theirs[2:]
                    and mine[0].same(mine[1], theirs[1])):
                runtime, name, host, port = theirs
                out.append(draft.doc.problem(
                    ("spec", "excludes", i),
                    f"{other!r} serves the same {runtime.title} model ({name} on {host}:{port}): "
                    "one model in memory is resident for both, so neither can exclude the other"))
    return out


def _role_warnings(draft: RoleDraft, declared: Declared) -> list[Problem]:
    spec, doc = draft.spec, draft.doc
    rt = spec_of(spec.runtime)
    out: list[Problem] = []
    # An exclusion of a role no document declares is a warning, not an error:
    # deleting one role's file must not invalidate the roles that exclude it
    # (then its removal would never be applied). It excludes nothing.
    for i, raw in enumerate(_raw_list(doc, "spec", "excludes")):
        other = str(raw).removeprefix("role:")
        if other != spec.name and other not in declared.roles:
            out.append(doc.problem(("spec", "excludes", i),
                                   f"no InferenceSpec named {other!r}; it excludes nothing"))
    for field in ("ctx", "kv_quant"):
        if getattr(spec.serve, field) is not None and field not in rt.serve_options:
            takers = " and ".join(str(s) for s in SPECS.values() if field in s.serve_options)
            out.append(doc.problem(("spec", "serve", field), f"ignored: only {takers} takes {field}"))
    if spec.liveness is not None and rt.shared_endpoint:
        # §4.1 is about one server process per role; a shared server (Ollama)
        # is never launched, so nothing of a role's own could be restarted.
        out.append(doc.problem(("spec", "liveness"), f"ignored: {rt.title} serves many roles "
                               "from one server the reconciler never launches or restarts"))
    if (doc.value.get("spec") or {}).get("idle_after") is not None and not spec.on_demand:  # type: ignore[union-attr]
        # §1.5 a field a role ignores is a warning: only on-demand roles idle out (§9).
        out.append(doc.problem(("spec", "idle_after"), f"ignored: only a role with state: "
                               f"on-demand is stopped when idle (this one is {spec.state})"))
    return out


def _model_roots(doc: Document, models: Mapping[str, ModelSpec],
                 declared: Declared) -> list[Problem]:
    """Each ``model_roots`` entry names a Model that has a root to replace."""
    out: list[Problem] = []
    roots = (doc.value.get("spec") or {}).get("model_roots") or {}  # type: ignore[union-attr]
    for name in roots:
        path = ("spec", "model_roots", name)
        if name not in declared.models:
            out.append(doc.problem(path, f"no Model named {name!r}"))
        elif name in models and models[name].format is ModelFormat.OLLAMA:
            out.append(doc.problem(path, f"Model {name!r} is an Ollama model: Ollama keeps "
                                         "its files, there is no root to move"))
    return out
