"""A release archive unpacked into a directory, refusing anything that leaves it (SHELL; §14).

``extract(archive, dest, kind=..., strip=N, limit=BYTES)`` writes the members
of a ``.tar.gz`` or ``.zip`` under ``dest`` (a new, empty directory) and
returns the regular files written (path relative to ``dest``, size). It
refuses, with ``Unsafe`` and nothing left behind by the caller's rename:

* an absolute member name, a ``..`` component, or a name that is not a safe
  relative path once ``strip`` leading components are dropped (§1.1's rule);
* a symbolic link whose target is absolute or resolves outside ``dest``; a
  hard link (tar) to anything; a device, FIFO or socket;
* more bytes than ``limit`` in all (a zip bomb stops at the limit, not at the
  disk), and a member written twice.

Modes: a file keeps its owner's execute bit (``0o755`` or ``0o644``); no
setuid, setgid or sticky bit survives, and nothing is chowned. Members are
streamed, never read whole. ``tarfile``'s and ``zipfile``'s own ``extract``
are not used: each member is checked here, then written by this module.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from typing import IO, Iterator

from reconciler.manifests.modeldoc import is_safe_relpath

BLOCK = 1 << 20


class Unsafe(ValueError):
    """The archive holds a member that may not be unpacked (the message says which)."""


def kind_of(url: str) -> str:
    """``zip`` or ``tar.gz`` by the URL's ending (the schema allows only these)."""
    return "zip" if url.lower().endswith(".zip") else "tar.gz"


def extract(archive: str, dest: str, *, kind: str, strip: int = 0,
            limit: int) -> list[tuple[str, int]]:
    """Unpack ``archive`` into the empty directory ``dest``; the regular files written."""
    written: list[tuple[str, int]] = []
    seen: set[str] = set()
    budget = [limit]
    members = _tar(archive) if kind == "tar.gz" else _zip(archive)
    for name, what, link, mode, size, opener in members:
        rel = _relative(name, strip)
        if rel is None:
            continue  # a stripped leading directory itself
        if rel in seen:
            raise Unsafe(f"{name}: the archive holds it twice")
        seen.add(rel)
        target = os.path.join(dest, rel)
        if what == "dir":
            os.makedirs(target, mode=0o755, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if what == "symlink":
            _check_link(name, rel, link, dest)
            os.symlink(link, target)
            continue
        if what != "file":
            raise Unsafe(f"{name}: a {what} is never unpacked")
        if size > budget[0]:
            raise Unsafe(f"{name}: more bytes than the Program declares ({limit} in all)")
        with opener() as src:
            written.append((rel, _copy(src, target, mode, budget, limit, name)))
    return written


def _relative(name: str, strip: int) -> str | None:
    if name.startswith("/") or "\\" in name:
        raise Unsafe(f"{name}: an absolute path is refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Unsafe(f"{name}: a '..' component is refused")
    parts = parts[strip:]
    if not parts:
        return None
    rel = "/".join(parts)
    if not is_safe_relpath(rel):
        raise Unsafe(f"{name}: not a safe relative path")
    return rel


def _check_link(name: str, rel: str, link: str, dest: str) -> None:
    if link.startswith("/"):
        raise Unsafe(f"{name}: a link to an absolute path ({link}) is refused")
    base = os.path.dirname(os.path.join(dest, rel))
    resolved = os.path.normpath(os.path.join(base, link))
    root = os.path.normpath(dest)
    if os.path.commonpath([resolved, root]) != root:
        raise Unsafe(f"{name}: a link out of the archive's tree ({link}) is refused")


def _copy(src: IO[bytes], target: str, mode: int, budget: list[int], limit: int,
          name: str) -> int:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                 0o755 if mode & 0o100 else 0o644)
    total = 0
    try:
        while block := src.read(BLOCK):
            total += len(block)
            budget[0] -= len(block)
            if budget[0] < 0:
                raise Unsafe(f"{name}: more bytes than the Program declares ({limit} in all)")
            view = memoryview(block)
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return total


Member = tuple[str, str, str, int, int, object]  # name, kind, link target, mode, size, opener


def _tar(path: str) -> Iterator[Member]:
    with tarfile.open(path, "r:gz") as tar:
        for m in tar:
            if m.isdir():
                what = "dir"
            elif m.isreg():
                what = "file"
            elif m.issym():
                what = "symlink"
            elif m.islnk():
                raise Unsafe(f"{m.name}: a hard link is refused")
            else:
                what = "device or FIFO"
            yield (m.name, what, m.linkname, m.mode, m.size,
                   (lambda m=m: tar.extractfile(m)))  # type: ignore[misc]


def _zip(path: str) -> Iterator[Member]:
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if info.is_dir():
                what, link = "dir", ""
            elif kind == stat.S_IFLNK:
                what, link = "symlink", z.read(info, pwd=None).decode("utf-8", "replace")
            elif kind in (0, stat.S_IFREG):
                what, link = "file", ""
            else:
                what, link = "device or FIFO", ""
            yield (info.filename, what, link, mode, info.file_size,
                   (lambda info=info: z.open(info)))  # type: ignore[misc]
