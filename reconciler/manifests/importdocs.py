"""Translated command lines → the documents ``reconcile import`` writes (PURE).

``translate`` says what each flag becomes; this module writes it down: one InferenceSpec per
role, one Model per weight file (from the file facts the shell hashed, or none when the file
is not on this machine), and a NodeConfig whose allowed ports, serve programs and router
cover the roles. The same function serves the command and the corpus test
(``tests/manifests/test_import_corpus.py``), which feeds it facts of files that exist on the
machine the line came from.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from reconciler.core.desired import ModelFormat, Runtime
from reconciler.manifests import modeldoc
from reconciler.manifests.modeldoc import FileFact
from reconciler.manifests.translate import ModelNeed, Note, Translation, Weight

frozen = attrs.frozen(kw_only=True)
API_VERSION = modeldoc.API_VERSION


@frozen
class RoleDraft:
    """One role to write: its translation and the options a config gave beside the command."""

    name: str
    translation: Translation
    state: str | None = None  # "on-demand" for llama-swap models
    idle_after: str | None = None
    aliases: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    excludes: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()


@frozen
class Located:
    """A weight file's facts: found on this machine under ``root`` (hashed by the shell), or
    pinned at a Hub commit (``hf``: repository and 40-hex revision, as ``models add hf://``
    reads them from the Hub's metadata; a node with ``fetch`` fetches it, §1.6)."""

    shards: tuple[FileFact, ...]
    fmt: ModelFormat
    root: str | None = None
    hf: tuple[str, str] | None = None


@frozen
class Written:
    """The documents, and what could not be written (models not on this machine)."""

    documents: tuple[dict, ...]
    missing: tuple[tuple[str, ModelNeed], ...]  # (model name, what the command named)


def model_name(need: ModelNeed) -> str:
    """The Model's name: the file's stem (``qwen2.5-7b-q4_k_m``), or the repository's name."""
    text = need.path or need.hf_file or (need.hf_repo or "model").split("/")[-1].replace(":", "-")
    base = text.replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in (".gguf", ".safetensors"):
        base = base.removesuffix(suffix)
    return modeldoc.plain_name(base or "model")


def documents(roles: Iterable[RoleDraft], located: Mapping[ModelNeed, Located], *,
              programs: Mapping[Runtime, str], router_port: int | None = None,
              key_dir: str = "/etc/reconciler/keys") -> Written:
    """Every document for ``roles``; a ModelNeed without a ``located`` entry is ``missing``."""
    docs: list[dict] = []
    models: dict[str, dict] = {}
    missing: list[tuple[str, ModelNeed]] = []
    ports: list[int] = []
    runtimes: set[Runtime] = set()
    for role in roles:
        tr = role.translation
        runtimes.add(tr.runtime)
        names = {}
        for need in tr.models:
            name = names[need] = model_name(need)
            found = located.get(need)
            if found is None:
                missing.append((name, need))
            elif name not in models:
                models[name] = _model(name, found)
        spec = _role_spec(role, names, key_dir)
        if isinstance(spec["serve"].get("port"), int):
            ports.append(spec["serve"]["port"])
        docs.append({"apiVersion": API_VERSION, "kind": "InferenceSpec",
                     "metadata": {"name": role.name}, "spec": spec})
    node = _node(ports, runtimes, programs, router_port)
    return Written(documents=(node, *models.values(), *docs), missing=tuple(missing))


def _model(name: str, found: Located) -> dict:
    if found.root is not None:
        return modeldoc.model_document(name=name, fmt=found.fmt, root=found.root,
                                       shards=found.shards)
    assert found.hf is not None, "a Located is under a root or at a Hub commit"
    repo, revision = found.hf
    return {"apiVersion": API_VERSION, "kind": "Model", "metadata": {"name": name}, "spec": {
        "format": str(found.fmt), "source": {"hf": repo, "revision": revision},
        "shards": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in found.shards]}}


def _role_spec(role: RoleDraft, names: Mapping[ModelNeed, str], key_dir: str) -> dict:
    tr = role.translation
    serve = dict(tr.serve)
    serve.setdefault("port", 8080)
    spec: dict = {"runtime": str(tr.runtime), "mode": "managed"}
    loras = []
    for need in tr.models:
        name = names[need]
        if need.weight is Weight.MODEL:
            spec["model"] = name
        elif need.weight is Weight.LORA:
            loras.append({"model": name, "scale": need.scale if need.scale is not None else 1.0})
        else:
            serve[str(need.weight)] = name
    if loras:
        serve["loras"] = loras
    if tr.api_key and "api_key_file" not in serve:
        serve["api_key_file"] = f"{key_dir}/{role.name}.key"
    if role.state:
        spec["state"] = role.state
    if role.idle_after and role.state == "on-demand":
        spec["idle_after"] = role.idle_after
    spec["serve"] = serve
    aliases = [a for a in (*tr.aliases, *role.aliases) if a != role.name]
    if aliases:
        spec["aliases"] = list(dict.fromkeys(aliases))
    env = dict((*tr.env, *role.env))
    if env:
        spec["env"] = env
    if role.excludes:
        spec["excludes"] = list(role.excludes)
    return spec


def _node(ports: list[int], runtimes: set[Runtime], programs: Mapping[Runtime, str],
          router_port: int | None) -> dict:
    spec: dict = {}
    if ports:
        spec["allowed_ports"] = {"from": min(ports), "to": max(ports)}
    spec["serve_programs"] = {str(r): programs[r] for r in sorted(runtimes) if r in programs}
    if router_port is not None:
        spec["router"] = {"listen": f"127.0.0.1:{router_port}"}
    return {"apiVersion": API_VERSION, "kind": "NodeConfig", "metadata": {"name": "imported"},
            "spec": spec}
