"""Translated command lines → the documents ``reconcile import`` writes (PURE).

``translate`` says what each flag becomes; this module writes it down: one InferenceSpec per
role, one Model per weight file (from the file facts the shell hashed, or none when the file
is not on this machine; named by ``model_names``, so that two files of one name in different
folders never become one Model), and a NodeConfig whose allowed ports, serve programs and router
cover the roles. The same function serves the command and the corpus test
(``tests/manifests/test_import_corpus.py``), which feeds it facts of files that exist on the
machine the line came from.
"""

from __future__ import annotations

import posixpath
from typing import Iterable, Mapping

import attrs

from reconciler.core.desired import ModelFormat, Runtime
from reconciler.manifests import modeldoc, roleextras
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
    max_concurrency: int | None = None  # llama-swap's concurrencyLimit


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


def file_key(need: ModelNeed) -> tuple[str, ...]:
    """What makes two weight files one: the full path (normalised), or the Hub repository and
    file. Never the file name alone: ``/srv/a/mmproj-F16.gguf`` and ``/srv/b/mmproj-F16.gguf``
    are two projectors."""
    if need.path is not None:
        return ("path", posixpath.normpath(need.path))
    return ("hf", need.hf_repo or "", need.hf_file or "")


def model_names(needs: Iterable[ModelNeed]) -> dict[ModelNeed, str]:
    """Each weight file's Model name (BEHAVIOUR §1.7): its stem when no other file of the
    import has that stem; otherwise the stem after the fewest folders that tell the files
    apart (``a-mmproj-F16``, ``b-mmproj-F16``), numbered only if the folders cannot. One
    file (one ``file_key``) is one name, whichever roles and weights name it."""
    needs = list(needs)
    files: dict[tuple[str, ...], ModelNeed] = {}
    for need in needs:
        files.setdefault(file_key(need), need)
    stems: dict[str, list[tuple[str, ...]]] = {}
    for key, need in files.items():
        stems.setdefault(model_name(need), []).append(key)
    chosen = {keys[0]: stem for stem, keys in stems.items() if len(keys) == 1}
    taken = set(chosen.values())
    for stem, keys in stems.items():
        if len(keys) == 1:
            continue
        folders = {key: _folders(files[key]) for key in keys}
        for depth in (1, 2, 3, 0):
            named = {key: modeldoc.plain_name("-".join((*folders[key][-depth:], stem))
                                              if depth else stem) for key in keys}
            if depth == 0 or len(set(named.values())) == len(keys):
                break
        for key in keys:
            name = candidate = named[key]
            n = 2
            while candidate in taken:
                candidate = f"{name[:60]}-{n}"
                n += 1
            taken.add(candidate)
            chosen[key] = candidate
    return {need: chosen[file_key(need)] for need in needs}


def _folders(need: ModelNeed) -> tuple[str, ...]:
    """The folders above a file (``/srv/a/x.gguf``: ``srv``, ``a``), or its Hub repository."""
    if need.path is None:
        return tuple(p for p in (need.hf_repo or "").split(":")[0].split("/") if p)
    parts = posixpath.normpath(need.path.replace("\\", "/")).split("/")[:-1]
    return tuple(p for p in parts if p not in ("", ".", "..", "~"))


def checked_env(role: RoleDraft) -> RoleDraft:
    """Only what ``spec.env`` accepts is written (BEHAVIOUR §1.7): a variable the runtime's
    allowlist refuses is ``not carried`` with validation's own words, never written into a
    file that would not validate."""
    runtime = role.translation.runtime
    notes = [Note(flag=name, kept=False, what=why) for name, value in (*role.translation.env,
             *role.env) if (why := roleextras.env_problem(runtime, name, value))]
    if not notes:
        return role
    refused = {n.flag for n in notes}
    tr = attrs.evolve(role.translation,
                      env=tuple(e for e in role.translation.env if e[0] not in refused))
    return attrs.evolve(role, translation=tr, notes=(*role.notes, *notes),
                        env=tuple(e for e in role.env if e[0] not in refused))


SERVER_DEFAULT_PORT = 8080  # llama-server's port when the command names none


def distinct_ports(roles: Iterable[RoleDraft], *, reserved: Iterable[int] = ()) -> list[RoleDraft]:
    """The one-port pattern (BEHAVIOUR §1.7): a llama-swap config may give every model one
    fixed ``--port`` (or none: the server's 8080), since it runs one at a time; our roles each
    need their own. The first role keeps a shared port, each other one gets the next port up
    that no role (nor ``reserved``: the router's) holds, with a note that says so — clients
    never see it: the router forwards by model name."""
    roles = list(roles)
    port_of = [r.translation.serve.get("port", SERVER_DEFAULT_PORT) for r in roles]
    taken = {*port_of, *reserved}
    seen: dict[int, str] = {}
    out = []
    for role, port in zip(roles, port_of):
        if port not in seen and port not in set(reserved):
            seen[port] = role.name
            out.append(role)
            continue
        new = port + 1
        while new in taken:
            new += 1
        taken.add(new)
        shared = (f"role {seen[port]}'s port too (llama-swap runs one model at a time on it)"
                  if port in seen else "the router's port (llama-swap's own listen port)")
        note = Note(flag="--port", kept=True, changed=True, what=(
            f"{port} is {shared}: this role gets {new}; clients never see it, the router "
            "forwards by model name"))
        tr = attrs.evolve(role.translation, serve={**role.translation.serve, "port": new})
        out.append(attrs.evolve(role, translation=tr, notes=(*role.notes, note)))
    return out


def documents(roles: Iterable[RoleDraft], located: Mapping[ModelNeed, Located], *,
              programs: Mapping[Runtime, str], router_port: int | None = None,
              key_dir: str = "/etc/reconciler/keys") -> Written:
    """Every document for ``roles``; a ModelNeed without a ``located`` entry is ``missing``."""
    docs: list[dict] = []
    models: dict[str, dict] = {}
    missing: list[tuple[str, ModelNeed]] = []
    ports: list[int] = []
    runtimes: set[Runtime] = set()
    roles = list(roles)
    names = model_names(need for role in roles for need in role.translation.models)
    for role in roles:
        tr = role.translation
        runtimes.add(tr.runtime)
        for need in tr.models:
            name = names[need]
            found = located.get(need)
            if found is None:
                if all(name != m for m, _ in missing):  # one step per Model, however many roles
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
    serve.setdefault("port", SERVER_DEFAULT_PORT)
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
    if role.max_concurrency is not None:
        spec["max_concurrency"] = role.max_concurrency
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
