"""``reconcile programs add PATH``: pin a server program by digest (SHELL; BEHAVIOUR §14).

Hashes the executable at PATH and the shared libraries beside it (``*.so``,
``*.so.*``, ``*.dylib`` in the same directory, as a llama.cpp release ships
them) where they lie, and prints a ``kind: Program`` document (``-o FILE``:
writes it). Nothing is copied, and nothing is run: the version is the
operator's word (``--version b11434``; ``llama-server --version`` prints the
build), and the reconciler checks it against the server's own report once
the server runs. A symbolic link as PATH is followed: the Program's root is
the directory the binary really lies in.
"""

from __future__ import annotations

import os
import stat

import attrs
import yaml

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.units import is_plain_token
from reconciler.manifests.modeldoc import API_VERSION, is_safe_relpath
from reconciler.models.modelstore import hash_file

_LIBRARY = (".so", ".dylib")
_RUNTIMES = {"llama-server": "llamacpp", "mlx_lm.server": "mlx-lm", "ollama": "ollama"}


@attrs.frozen(kw_only=True)
class ProgramsAddOptions:
    path: str = ""
    version: str | None = None
    name: str | None = None
    runtime: str | None = None
    output: str | None = None


def _is_library(name: str) -> bool:
    return name.endswith(_LIBRARY) or ".so." in name


def program_document(path: str, *, version: str, name: str | None = None,
                     runtime: str | None = None) -> dict:
    """The ``kind: Program`` of the executable at ``path`` and the libraries beside it."""
    real = os.path.realpath(path)
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        raise ValueError(f"{path} is not an executable file")
    root, entry = os.path.split(real)
    runtime = runtime or _RUNTIMES.get(entry)
    if runtime is None:
        raise ValueError(f"which server is {entry}? give --runtime (llamacpp, mlx-lm, ollama)")
    name = name or (f"llama-{version}" if runtime == "llamacpp" else f"{runtime}-{version}")
    if not is_plain_token(name):
        raise ValueError(f"{name!r} is not a plain token: give --name")
    names = [entry] + sorted(n for n in os.listdir(root) if n != entry and _is_library(n))
    files = []
    for rel in sorted(names):
        full = os.path.join(root, rel)
        target = os.path.realpath(full)
        if os.path.dirname(target) != root or not os.path.isfile(target):
            continue  # a library linked from elsewhere is not this program's to pin
        if not is_safe_relpath(rel):
            raise ValueError(f"{rel!r} cannot be named in a manifest (not a safe relative path)")
        hashed = hash_file(target)
        files.append({"path": rel, "size": hashed.stamp.size, "sha256": hashed.stamp.sha256})
    spec = {"runtime": runtime, "version": version, "root": root, "entrypoint": entry,
            "files": files}
    return {"apiVersion": API_VERSION, "kind": "Program", "metadata": {"name": name},
            "spec": spec}


def run_add(g: GlobalOptions, o: ProgramsAddOptions) -> int:
    return common.emit_document(lambda: _added(o), o.output)


def _added(o: ProgramsAddOptions) -> str:
    """The Program document ``programs add`` prints (or writes to ``--output``)."""
    if not o.version:
        raise ValueError("give --version (llama.cpp's build, e.g. b11434: "
                         "`llama-server --version` prints it); nothing is run to find it")
    doc = program_document(o.path, version=o.version, name=o.name, runtime=o.runtime)
    return ("# Pinned by digest (BEHAVIOUR §14): `reconcile programs add` hashed these "
            "files in place.\n" + yaml.safe_dump(doc, sort_keys=False))
