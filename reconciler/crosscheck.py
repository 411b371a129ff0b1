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
from reconciler.policy import normal_tag
from reconciler.desired import (
    Desired,
    LOADABLE_FORMATS,
    ModelFormat,
    ModelSpec,
    NodeConfig,
    RoleSpec,
    Runtime,
    sorted_by_name,
)
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
    if spec.runtime is Runtime.OLLAMA:
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
        loadable = LOADABLE_FORMATS[spec.runtime]
        if is_draft and model.format is not ModelFormat.GGUF:
            out.append(doc.problem(path, f"draft model {name!r} is {model.format}; "
                                         "llamacpp loads only gguf"))
        elif not is_draft and model.format not in loadable:
            can = " or ".join(sorted(loadable))
            out.append(doc.problem(path, f"model {name!r} is {model.format}; "
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
    """Two roles on one host:port, unless both are Ollama roles (one Ollama serves both)."""
    by_address: dict[tuple[str, int], list[RoleDraft]] = defaultdict(list)
    for draft in drafts:
        by_address[(draft.spec.serve.host, draft.spec.serve.port)].append(draft)
    out: list[Problem] = []
    for (host, port), group in by_address.items():
        if len(group) < 2 or all(d.spec.runtime is Runtime.OLLAMA for d in group):
            continue
        group = sorted(group, key=lambda d: (d.doc.file, d.doc.line))
        first = group[0]
        for other in group[1:]:
            out.append(other.doc.problem(
                ("spec", "serve", "port"),
                f"{host}:{port} is also the address of role {first.spec.name!r} "
                f"({first.doc.file}:{first.doc.line}); only Ollama roles may share one"))
    return out


def _shared_model_excludes(drafts: Sequence[RoleDraft],
                           models: Mapping[str, ModelSpec]) -> list[Problem]:
    """Roles serving one Ollama model on one server cannot exclude each other (BEHAVIOUR §7).

    One model in memory is the residency of every role that names it, so such
    an exclusion could never hold while both run.
    """
    served: dict[str, tuple[str, str, int]] = {}
    for draft in drafts:
        spec = draft.spec
        model = models.get(spec.model or "") if spec.runtime is Runtime.OLLAMA else None
        if model is not None and model.ollama_tag:
            served[spec.name] = (normal_tag(model.ollama_tag), spec.serve.host, spec.serve.port)
    out: list[Problem] = []
    for draft in drafts:
        mine = served.get(draft.spec.name)
        for i, raw in enumerate(_raw_list(draft.doc, "spec", "excludes") if mine else ()):
            other = str(raw).removeprefix("role:")
            if other != draft.spec.name and served.get(other) == mine:
                assert mine is not None
                tag, host, port = mine
                out.append(draft.doc.problem(
                    ("spec", "excludes", i),
                    f"{other!r} serves the same Ollama model ({tag} on {host}:{port}): "
                    "one model in memory is resident for both, so neither can exclude the other"))
    return out


def _role_warnings(draft: RoleDraft, node: NodeConfig) -> list[Problem]:
    spec, doc = draft.spec, draft.doc
    out: list[Problem] = []
    if spec.runtime is not Runtime.LLAMACPP:
        for field in ("ctx", "kv_quant"):
            if getattr(spec.serve, field) is not None:
                out.append(doc.problem(("spec", "serve", field),
                                       f"ignored: only llamacpp takes {field}"))
    if spec.managed and spec.runtime is not Runtime.OLLAMA \
            and node.serve_program(spec.runtime) is None:
        out.append(doc.problem(("spec", "runtime"),
                               f"NodeConfig has no serve_programs.{spec.runtime}: this managed "
                               "role cannot be started until it does"))
    return out
