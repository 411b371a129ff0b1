"""A role's server beyond model, host and port: weights, caches, key, env, files, names (PURE).

BEHAVIOUR §1.4: the fields of an InferenceSpec that stand for server flags
the reconciler owns (``cache_type_k``/``_v``, ``mmproj``, ``loras``,
``adapter``, ``api_key_file``), the role's own environment (names from its
runtime's allowlist, ``RuntimeSpec.env_names``), the names clients may send
(``aliases``, §9), and the repository files its ``extra_args`` name. Reading
those files is the shell's: the loader is handed ``RepoFiles``, a mapping
from ``(manifest file, path as written)`` to the file's bytes or why it cannot
be read (``repo/sources.py`` builds it: inside the repository, no symlink
out, at most 1 MiB).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Mapping

from reconciler.core.desired import LoraRef, RepoFile, Runtime
from reconciler.manifests import extra_args
from reconciler.runtimes import spec_of
from reconciler.runtimes.flags import MAX_VALUE_CHARS

#: (manifest file name, path as written) → its bytes, or a message why not.
RepoFiles = Mapping[tuple[str, str], "bytes | str"]

#: Never settable by a role, whatever a runtime allows (§6).
NEVER_ENV = ("PATH", "LD_*", "PYTHON*", "RECONCILER_*", "LLAMA_ARG_*", "LLAMA_API_KEY",
             "HF_*", "HOME")
_WHY_NEVER = {
    "LLAMA_ARG_*": "it would set a llama-server flag around the flag table; use extra_args",
    "LLAMA_API_KEY": "use spec.serve.api_key_file",
}

Add = Callable[[tuple[str | int, ...], str], None]


#: §1.5: a control character (C0, DEL, C1) in printed text would reach a terminal raw.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def matches(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def env_problem(runtime: Runtime, name: str, value: object) -> str | None:
    """Why ``name=value`` cannot be in a role's ``spec.env``, or None."""
    for pattern in NEVER_ENV:
        if matches(name, pattern):
            why = _WHY_NEVER.get(pattern, "the reconciler sets the server's environment")
            return f"{name} is never settable by a role: {why}"
    allowed = spec_of(runtime).env_names
    if not any(matches(name, p) for p in allowed):
        return (f"{name} is not a variable {runtime} roles may set (allowed: "
                f"{', '.join(allowed) or 'none'})")
    if not isinstance(value, str):
        return f"the value of {name} must be a string (quote numbers: \"0\")"
    if CONTROL.search(value):
        return (f"the value of {name} must be text without control characters (C0, DEL or "
                f"C1), not {value!r}")
    if len(value) > MAX_VALUE_CHARS:
        return f"the value of {name} must be at most {MAX_VALUE_CHARS} characters"
    return None


def alias_problem(alias: object) -> str | None:
    """Why ``alias`` cannot be one of ``spec.aliases`` (§9), or None."""
    text = str(alias)
    if not text.strip():
        return "an alias must not be blank: clients send it as `model`"
    if CONTROL.search(text):
        return f"an alias is text without control characters (C0, DEL or C1), not {text!r}"
    return None


def read(get: Callable[..., Any], add: Add, runtime: Runtime, file: str,
         repo_files: RepoFiles | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ServeSpec fields, RoleSpec fields) of the new role fields, problems via ``add``."""
    serve: dict[str, Any] = {}
    for field in ("cache_type_k", "cache_type_v", "mmproj", "adapter", "api_key_file"):
        serve[field] = get("spec", "serve", field)
    serve["slot_save"] = bool(get("spec", "serve", "slot_save"))
    serve["loras"] = tuple(
        LoraRef(model=item["model"], scale=float(item.get("scale", 1.0)))
        for item in get("spec", "serve", "loras") or ())
    role: dict[str, Any] = {}
    aliases = get("spec", "aliases") or ()
    for i, alias in enumerate(aliases):
        problem = alias_problem(alias)
        if problem:
            add(("spec", "aliases", i), problem)
    role["aliases"] = tuple(dict.fromkeys(str(a) for a in aliases))
    env = get("spec", "env") or {}
    devices = spec_of(runtime).devices
    planners = devices.owned_env if devices is not None and get("spec", "placement", "devices") \
        else frozenset()
    for name, value in env.items():
        problem = env_problem(runtime, str(name), value) or (
            f"{name} is set by the planner from spec.placement.devices; remove it"
            if name in planners else None)
        if problem:
            add(("spec", "env", name), problem)
    role["env"] = tuple(sorted((str(k), str(v)) for k, v in env.items()))
    args = get("spec", "serve", "extra_args") or []
    serve["files"] = _files(runtime, args, file, repo_files, add)
    return serve, role


def _files(runtime: Runtime, args: list[str], file: str, repo_files: RepoFiles | None,
           add: Add) -> tuple[RepoFile, ...]:
    out = []
    for index, spelling, path in extra_args.file_values(runtime, args):
        where = ("spec", "serve", "extra_args", index)
        got = repo_files.get((file, path)) if repo_files is not None else (
            "repository files are read only when manifests are read from disk")
        if isinstance(got, bytes):
            out.append(RepoFile(index=index, path=path,
                                sha256=hashlib.sha256(got).hexdigest(), data=got))
        else:
            add(where, f"{spelling} {path}: {got or 'cannot be read'}")
    return tuple(out)
