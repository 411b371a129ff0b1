"""Checks across documents, and the final merge into ``Desired`` (PURE; BEHAVIOUR §1.5).

Runs on documents that passed the schema and their own checks. Names that a
broken document declares still count as declared, so a role pointing at a
Model with a typo in its sha256 is not also told the Model does not exist.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import attrs

from reconciler.documents import RoleDraft
from reconciler.errors import Problem
from reconciler.desired import (
    Desired,
    ModelSpec,
    NodeConfig,
    RoleSpec,
    sorted_by_name,
)
from reconciler.runtimes import SPECS, spec_of
from reconciler.yamlsafe import Document


@attrs.frozen(kw_only=True)
class Declared:
    """Every name some document declares, valid or not: kind → names."""

    models: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()


def assemble(
    drafts: Sequence[RoleDraft],
    models: Mapping[str, ModelSpec],
    node: tuple[NodeConfig, Document] | None,
    declared: Declared,
) -> tuple[Desired, list[Problem], list[Problem]]:
    """The merged ``Desired``, the cross-document problems, and warnings."""
    config = node[0] if node else NodeConfig()
    problems: list[Problem] = []
    warnings: list[Problem] = []
    roles: list[RoleSpec] = []
    for draft in drafts:
        problems += _references(draft, models, declared)
        problems += _port_allowed(draft, config, node)
        warnings += _role_warnings(draft, config)
        roles.append(_merge(draft, models.get(draft.spec.model or ""), config))
    problems += _collisions(drafts)
    problems += _shared_model_excludes(drafts, models)
    if drafts and config.allowed_ports is None:
        where = node[1] if node else drafts[0].doc
        path = ("spec",) if node else ()
        warnings.append(where.problem(path, "no allowed_ports in NodeConfig: any port may be "
                                            "probed and served; set allowed_ports {from, to}"))
    desired = Desired(roles=sorted_by_name(roles), models=sorted_by_name(models.values()),
                      node=config)
    return desired, problems, warnings


def _merge(draft: RoleDraft, model: ModelSpec | None, node: NodeConfig) -> RoleSpec:
    """NodeConfig defaults and the model's size, merged into the role."""
    spec = draft.spec
    weights = draft.weights if draft.weights is not None else (
        model.weights_size if model is not None else 0)
    keep_alive = None
    if spec_of(spec.runtime).loads_models:  # keep_alive is how long a loaded model stays
        keep_alive = draft.keep_alive if draft.keep_alive is not None else node.keep_alive
    return attrs.evolve(
        spec,
        restart=attrs.evolve(node.restart, **dict(draft.restart)),
        keep_alive=keep_alive,
        memory=attrs.evolve(spec.memory, weights=weights),
    )


def _references(draft: RoleDraft, models: Mapping[str, ModelSpec],
                declared: Declared) -> list[Problem]:
    spec, doc = draft.spec, draft.doc
    out: list[Problem] = []
    checks = [(("spec", "model"), spec.model, False)]
    if spec.serve.draft_model is not None:
        checks.append((("spec", "serve", "draft_model"), spec.serve.draft_model, True))
    for path, name, is_draft in checks:
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
            what = "draft model" if is_draft else "model"
            out.append(doc.problem(path, f"{what} {name!r} is {model.format}; "
                                         f"{spec.runtime} loads only {can}"))
    raw_excludes = _raw_list(doc, "spec", "excludes")
    for i, raw in enumerate(raw_excludes):
        other = str(raw).removeprefix("role:")
        if other == spec.name:
            out.append(doc.problem(("spec", "excludes", i), "a role cannot exclude itself"))
        elif other not in declared.roles:
            out.append(doc.problem(("spec", "excludes", i), f"no InferenceSpec named {other!r}"))
    return out


def _raw_list(doc: Document, *path: str) -> list[object]:
    value: object = doc.value
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value if isinstance(value, list) else []


def _port_allowed(draft: RoleDraft, node: NodeConfig,
                  where: tuple[NodeConfig, Document] | None) -> list[Problem]:
    port = draft.spec.serve.port
    if node.port_allowed(port):
        return []
    at = f" (NodeConfig at {where[1].file}:{where[1].line})" if where else ""
    return [draft.doc.problem(("spec", "serve", "port"),
                              f"port {port} is outside allowed_ports {node.allowed_ports}{at}")]


def _collisions(drafts: Sequence[RoleDraft]) -> list[Problem]:
    """Two roles on one host:port, unless both run on one shared-endpoint runtime
    (one Ollama serves several roles, each a model on it)."""
    by_address: dict[tuple[str, int], list[RoleDraft]] = defaultdict(list)
    for draft in drafts:
        by_address[(draft.spec.serve.host, draft.spec.serve.port)].append(draft)
    shared = " or ".join(s.title for s in SPECS.values() if s.shared_endpoint) or "no"
    out: list[Problem] = []
    for (host, port), group in by_address.items():
        runtimes = {d.spec.runtime for d in group}
        if len(group) < 2 or (len(runtimes) == 1 and spec_of(runtimes.pop()).shared_endpoint):
            continue
        group = sorted(group, key=lambda d: (d.doc.file, d.doc.line))
        first = group[0]
        for other in group[1:]:
            out.append(other.doc.problem(
                ("spec", "serve", "port"),
                f"{host}:{port} is also the address of role {first.spec.name!r} "
                f"({first.doc.file}:{first.doc.line}); only {shared} roles may share one"))
    return out


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


def _role_warnings(draft: RoleDraft, node: NodeConfig) -> list[Problem]:
    spec, doc = draft.spec, draft.doc
    rt = spec_of(spec.runtime)
    out: list[Problem] = []
    for field in ("ctx", "kv_quant"):
        if getattr(spec.serve, field) is not None and field not in rt.serve_options:
            takers = " and ".join(str(s) for s in SPECS.values() if field in s.serve_options)
            out.append(doc.problem(("spec", "serve", field), f"ignored: only {takers} takes {field}"))
    if spec.managed and rt.launched and node.serve_program(spec.runtime) is None:
        out.append(doc.problem(("spec", "runtime"),
                               f"NodeConfig has no serve_programs.{spec.runtime}: this managed "
                               "role cannot be started until it does"))
    return out
