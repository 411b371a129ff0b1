"""Reading manifest files and directories (SHELL).

A path may be a file (read whatever its name) or a directory, of which only
the ``*.yaml`` / ``*.yml`` files directly inside are read, in name order;
hidden files are skipped, subdirectories are not entered (so
``manifests/examples/`` is never part of the live ``manifests/`` set), and a
symlink that leads out of the directory is refused. Files over 1 MiB are
refused before they are read whole, and anything that is not a regular file
(a FIFO would block) is refused before it is opened for reading.

Problems are values (``Problem`` with line 0: "the file as a whole").
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from typing import Sequence

import attrs

from reconciler.manifests import loader
from reconciler.core.errors import Problem, sorted_problems
from reconciler.manifests.fleet import Fleet, NodeChoice, names
from reconciler.manifests.loader import LoadResult
from reconciler.repo.repofiles import RepoFiles
from reconciler.manifests.yamlsafe import MAX_FILE_BYTES

SUFFIXES = (".yaml", ".yml")


def read_manifests(paths: Sequence[str]) -> tuple[list[tuple[str, bytes]], list[Problem]]:
    """``(name, bytes)`` for every manifest file under ``paths``, and every refusal."""
    files: list[tuple[str, bytes]] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for path in paths:
        for name, problem in _expand(path):
            if problem is not None:
                problems.append(problem)
                continue
            real = os.path.realpath(name)
            if real in seen:
                continue
            seen.add(real)
            data, problem = _read(name)
            if problem is not None:
                problems.append(problem)
            else:
                files.append((name, data))
    return files, problems


def load_desired(paths: Sequence[str], *, cache_dir: str | None = None,
                 node: NodeChoice | None = None) -> LoadResult:
    """Read ``paths`` and load them: the whole of ``reconcile validate`` but printing.

    With ``cache_dir`` (the state directory), the digest of a manifest set that
    loaded without problems is remembered there, and the same bytes later
    skip the JSON Schema stage (see ``loader.load``). Any changed byte, a
    new reconciler version or changed schemas make a new digest.

    ``node``: this node (BEHAVIOUR §10). A node that no NodeConfig is for is
    not in the fleet: that is a problem of the set *for this node*, and like
    any other it makes the pass act on nothing.
    """
    files, problems = read_manifests(paths)
    digest = _set_digest(files) if cache_dir and not problems else None
    known = digest is not None and _remembered(cache_dir, digest)
    result = loader.load(files, schema_checked=known, node=node, repo_files=RepoFiles())
    if digest is not None and not known and result.ok:
        _remember(cache_dir, digest)
    if node is not None and result.ok and result.desired is None and result.fleet is not None:
        problems.append(_not_a_member(paths, node, result.fleet))
    if not problems:
        return result
    return attrs.evolve(result, desired=None, warnings=(),
                        problems=sorted_problems([*result.problems, *problems]))


def _not_a_member(paths: Sequence[str], node: NodeChoice, whole: Fleet) -> Problem:
    how = "--node or $RECONCILER_NODE" if node.explicit else "the host name; see --node"
    return Problem(file=paths[0] if paths else "manifests", line=0, message=(
        f"no NodeConfig is named {node.name!r} ({how}): this node is not in the fleet "
        f"(nodes: {names(n.name for n in whole.nodes)}) and runs nothing; nothing is changed"))


_CACHE_FILE = "validated-manifests"


def _set_digest(files: Sequence[tuple[str, bytes]]) -> str:
    from reconciler import __version__

    h = hashlib.sha256(__version__.encode())
    h.update(_schema_bytes())
    for name, data in files:
        h.update(b"\0%d:%s\0" % (len(data), name.encode("utf-8", "surrogateescape")))
        h.update(data)
    return h.hexdigest()


def _schema_bytes() -> bytes:
    """The schemas as their files hold them: any change to one changes the digest.

    Read straight from the package directory (parsing them, or importing
    ``importlib.resources``, would cost a cron run more than the rest of
    this step); from package data only where there is no such directory.
    """
    from reconciler.manifests import schemata

    folder = os.path.join(os.path.dirname(schemata.__file__), "schemas")
    try:
        chunks = []
        for kind in schemata.KINDS:
            with open(os.path.join(folder, f"{schemata.SCHEMA_FILES[kind]}.schema.json"),
                      "rb") as f:
                chunks.append(f.read())
    except OSError:  # a zipped install: no plain files
        return json.dumps([schemata.schema(k) for k in schemata.KINDS], sort_keys=True).encode()
    return b"\0".join(chunks)


def _remembered(cache_dir: str, digest: str) -> bool:
    try:
        with open(os.path.join(cache_dir, _CACHE_FILE), encoding="ascii") as f:
            return f.read().strip() == digest
    except (OSError, UnicodeDecodeError):
        return False


def _remember(cache_dir: str, digest: str) -> None:
    path = os.path.join(cache_dir, _CACHE_FILE)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(digest + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # only an optimisation


def _refusal(name: str, message: str) -> Problem:
    return Problem(file=name, line=0, message=message)


def _expand(path: str) -> list[tuple[str, Problem | None]]:
    try:
        st = os.stat(path)
    except OSError as err:
        return [(path, _refusal(path, _reason(err)))]
    if not stat.S_ISDIR(st.st_mode):
        return [(path, None)]
    try:
        names = sorted(os.listdir(path))
    except OSError as err:
        return [(path, _refusal(path, _reason(err)))]
    top = os.path.realpath(path)
    out: list[tuple[str, Problem | None]] = []
    for entry in names:
        if entry.startswith(".") or not entry.endswith(SUFFIXES):
            continue
        name = os.path.join(path, entry)
        if os.path.islink(name):
            target = os.path.realpath(name)
            if os.path.commonpath([top, target]) != top:
                out.append((name, _refusal(name, f"symlink leads out of {path} "
                                                 f"(to {target}); refused")))
                continue
        if os.path.isdir(name):
            continue  # a directory called x.yaml: not a manifest
        out.append((name, None))
    return out


def _read(name: str) -> tuple[bytes, Problem | None]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        return b"", _refusal(name, _reason(err))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", _refusal(name, "not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            return b"", _refusal(name, f"file is larger than 1 MiB ({st.st_size} bytes); "
                                       "manifests are small")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)  # the file may grow after fstat
    except OSError as err:
        return b"", _refusal(name, _reason(err))
    finally:
        os.close(fd)
    return data, None  # over-long data is refused by the pure loader


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "no such file or directory"
    return f"cannot read: {err.strerror or err}"
