"""Repository files that roles' flags read, for the loader (SHELL; BEHAVIOUR §1.4).

A ``FILE`` flag's value (``--chat-template-file templates/chat.jinja``) is a
path relative to the manifest file's own directory. ``RepoFiles`` is the
mapping the pure loader asks: ``(manifest file, path as written)`` → the
file's bytes, or a message why not. A file is read only when asked, once; it
must stay inside the manifests repository (the nearest directory above the
manifest holding ``.git``, else the manifest's own directory) with every
symlink resolved, be a regular file, and hold at most 1 MiB.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, Mapping

MAX_BYTES = 1024 * 1024


def repository_root(manifest: str) -> str:
    """The nearest directory above ``manifest`` holding ``.git``, else its own directory."""
    here = os.path.dirname(os.path.realpath(manifest))
    probe = here
    while True:
        if os.path.exists(os.path.join(probe, ".git")):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return here
        probe = parent


class RepoFiles(Mapping[tuple[str, str], "bytes | str"]):
    """Reads a repository file the first time the loader asks for it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], bytes | str] = {}

    def __getitem__(self, key: tuple[str, str]) -> bytes | str:
        if key not in self._seen:
            self._seen[key] = read(*key)
        return self._seen[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._seen)

    def __len__(self) -> int:
        return len(self._seen)


def read(manifest: str, path: str) -> bytes | str:
    """The bytes of ``path`` (relative to ``manifest``'s directory), or why not."""
    root = repository_root(manifest)
    wanted = os.path.join(os.path.dirname(os.path.abspath(manifest)), path)
    real = os.path.realpath(wanted)
    if os.path.commonpath([root, real]) != root:
        return f"leads out of the manifests repository ({root}); refused"
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return f"no such file (looked for {wanted})"
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size > MAX_BYTES:
            return f"larger than 1 MiB ({st.st_size} bytes)"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    finally:
        os.close(fd)
    return data if len(data) <= MAX_BYTES else "larger than 1 MiB"
