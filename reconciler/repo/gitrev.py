"""The manifest files as a git revision had them, without checking anything out (SHELL).

``reconcile fleet --diff REV`` compares the checkout with ``REV``. The files
at ``REV`` come from one ``git archive`` of the manifest path (a tar on
stdout, read in memory): the working tree, the index and HEAD are never
touched. The same rules as for the working tree (``sources.py``) decide
which files count: ``*.yaml``/``*.yml`` directly inside a directory, hidden
files skipped, nothing over 1 MiB, a symlink only when it stays inside the
directory. git runs through ``programs.run`` with our PATH and nothing else
of the environment.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from typing import Iterator, Mapping, Sequence

from reconciler.system import programs
from reconciler.core.errors import Problem, RevisionError
from reconciler.repo.sources import SUFFIXES
from reconciler.manifests.yamlsafe import MAX_FILE_BYTES

#: Seconds a git command may take.
GIT_TIMEOUT = 30.0


def manifests_at(rev: str, paths: Sequence[str], where: dict[str, tuple[str, str]] | None = None
                 ) -> tuple[list[tuple[str, bytes]], list[Problem]]:
    """``(name, bytes)`` of every manifest file under ``paths`` at ``rev``, and every refusal.

    Names read ``REV:PATH/FILE``, so a problem says which side it is on. ``where``,
    when given, is filled with each name's (checkout top, path in the repository).
    """
    files: list[tuple[str, bytes]] = []
    problems: list[Problem] = []
    for path in paths:
        found, refused = _one(rev, path, where if where is not None else {})
        files += found
        problems += refused
    return files, problems


class RepoFilesAt(Mapping[tuple[str, str], "bytes | str"]):
    """The repository files roles' file flags name, as ``rev`` had them (BEHAVIOUR §1.4):
    the same rules as ``repofiles.read`` (inside the repository, no symlink, ≤ 1 MiB)."""

    def __init__(self, rev: str, where: Mapping[str, tuple[str, str]]) -> None:
        self._rev, self._where = rev, where
        self._seen: dict[tuple[str, str], bytes | str] = {}

    def __getitem__(self, key: tuple[str, str]) -> bytes | str:
        if key not in self._seen:
            self._seen[key] = self._read(*key)
        return self._seen[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._seen)

    def __len__(self) -> int:
        return len(self._seen)

    def _read(self, manifest: str, path: str) -> bytes | str:
        if manifest not in self._where:
            return "unknown manifest"
        top, name = self._where[manifest]
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), path))
        if target == ".." or target.startswith("../") or posixpath.isabs(target):
            return f"leads out of the manifests repository at {self._rev}; refused"
        listed = _git(top, "ls-tree", "-l", self._rev, "--", target, check=False)
        fields = listed.stdout.decode("utf-8", "replace").split(None, 4)
        if not listed.ok or len(fields) < 5 or fields[4].strip() != target:
            return f"no such file at {self._rev}"
        mode, kind, _, size = fields[:4]
        if mode == "120000":
            return f"a symlink at {self._rev}; refused"
        if kind != "blob":
            return "not a regular file"
        if int(size) > MAX_FILE_BYTES:
            return f"larger than 1 MiB ({size} bytes)"
        return _git(top, "cat-file", "blob", f"{self._rev}:{target}").stdout


def _git(folder: str, *args: str, check: bool = True) -> programs.Ran:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ran = programs.run(["git", "-C", folder, *args], env=env, timeout=GIT_TIMEOUT)
    if check and not ran.ok:
        said = ran.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RevisionError(ran.failure or (said[-1] if said else f"git {args[0]} failed"))
    return ran


def _one(rev: str, path: str, located: dict[str, tuple[str, str]]
         ) -> tuple[list[tuple[str, bytes]], list[Problem]]:
    is_dir = os.path.isdir(path)
    folder = path if is_dir else (os.path.dirname(path) or ".")
    if not os.path.isdir(folder):
        raise RevisionError(f"{folder} is not a directory of a git checkout")
    top = _git(folder, "rev-parse", "--show-toplevel").stdout.decode().strip()
    commit = _git(folder, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not commit.ok:
        raise RevisionError(f"{rev!r} is not a commit of the checkout at {top}")
    sha = commit.stdout.decode().strip()
    where = os.path.relpath(os.path.realpath(path), os.path.realpath(top)).replace(os.sep, "/")
    where = "" if where == "." else where
    if where.startswith("../"):
        raise RevisionError(f"{path} is outside the checkout at {top}")
    archive = _git(top, "archive", "--format=tar", sha, "--", where or ".", check=False)
    if not archive.ok:  # the path did not exist at REV: no manifests then
        return [], []
    members = _members(archive.stdout)
    if is_dir:
        prefix = f"{where}/" if where else ""
        names = sorted(n for n in members if posixpath.dirname(n) == prefix.rstrip("/")
                       and _wanted(posixpath.basename(n)))
    else:
        names = [where] if where in members else []
    files, problems = [], []
    for name in names:
        shown = f"{rev}:{os.path.join(path, posixpath.basename(name)) if is_dir else path}"
        data, problem = _content(members, name, prefix=posixpath.dirname(name), shown=shown)
        if problem is not None:
            problems.append(problem)
        elif data is not None:
            files.append((shown, data))
            located[shown] = (top, name)
    return files, problems


def _wanted(base: str) -> bool:
    return not base.startswith(".") and base.endswith(SUFFIXES)


def _members(tar: bytes) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    out: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        for info in archive.getmembers():
            data = None
            if info.isfile() and info.size <= MAX_FILE_BYTES:
                extracted = archive.extractfile(info)
                data = extracted.read() if extracted is not None else None
            out[info.name.rstrip("/")] = (info, data)
    return out


def _content(members, name: str, *, prefix: str, shown: str) -> tuple[bytes | None, Problem | None]:
    info, data = members[name]
    if info.issym():
        target = posixpath.normpath(posixpath.join(prefix, info.linkname))
        inside = posixpath.dirname(target) == prefix and target in members
        if not inside or not members[target][0].isfile():
            return None, Problem(file=shown, line=0, message=f"symlink leads out of "
                                 f"{prefix or '.'} (to {info.linkname}); refused")
        info, data = members[target]
    if info.isdir():
        return None, None  # a directory called x.yaml: not a manifest
    if not info.isfile():
        return None, Problem(file=shown, line=0, message="not a regular file")
    if info.size > MAX_FILE_BYTES:
        return None, Problem(file=shown, line=0, message=f"file is larger than 1 MiB "
                             f"({info.size} bytes); manifests are small")
    return data, None
