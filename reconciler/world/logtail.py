"""Reading a managed server's log: its last lines, and what is appended (SHELL; BEHAVIOUR §6).

``reconcile logs`` and the status page's log panel (§11) read
``<instance dir>/server.log`` and its rotated predecessors ``server.log.1`` …
``.3`` (newest first) through ``serverlog.open_readable`` (no symlink, no hard
link, no FIFO: the directory belongs to the server's user).

``Follower.read()`` returns what was appended since its last call, like
``tail -F``: across the copy-and-truncate of a pass (the file shrinks: read it
from its start), a rename at a restart (a new file: read it from its start),
and a new instance directory (``find_again`` names another one: its log is
followed from its start). It never blocks; the caller decides how often to look.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from reconciler.world import serverlog

_BLOCK = 65536
RELOOK = 1.0  # seconds between looks for a new instance directory


def last_lines(where: str, count: int, *, end: int | None = None) -> list[bytes]:
    """The last ``count`` lines of the log, from the rotated files too when needed.

    ``end``: read the live file only up to this offset (a ``Follower``'s start,
    so that no line is both shown here and followed, or neither).
    """
    lines: list[bytes] = []
    for i in range(serverlog.DEFAULT_LOG_BACKUPS + 1):
        if len(lines) >= count:
            break
        name = serverlog.LOG_NAME if i == 0 else f"{serverlog.LOG_NAME}.{i}"
        fd = serverlog.open_readable(where, name)
        if fd is None:
            continue
        try:
            lines = _tail(fd, count - len(lines), end if i == 0 else None) + lines
        finally:
            os.close(fd)
    return lines[-count:] if count else []


def has_log(where: str) -> bool:
    names = [serverlog.LOG_NAME] + [f"{serverlog.LOG_NAME}.{i}"
                                     for i in range(1, serverlog.DEFAULT_LOG_BACKUPS + 1)]
    return any(os.path.exists(os.path.join(where, n)) for n in names)


def _tail(fd: int, count: int, end: int | None = None) -> list[bytes]:
    """The last ``count`` lines of an open file (up to ``end``), read backwards a block at a time."""
    if count <= 0:
        return []
    size = os.fstat(fd).st_size
    end = size if end is None else min(end, size)
    data, start = b"", end
    while start > 0 and data.count(b"\n") <= count:
        step = min(_BLOCK, start)
        start -= step
        data = os.pread(fd, step, start) + data
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    return lines[-count:]


class Follower:
    """What is appended to ``<where>/server.log`` from now on (``read()``); ``close()`` after."""

    def __init__(self, where: str, find_again: Callable[[], str], *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self._find_again = find_again
        self._monotonic = monotonic
        self._fd = serverlog.open_readable(where)
        self._offset = os.fstat(self._fd).st_size if self._fd is not None else 0
        self.start = self._offset  # where following began: ``last_lines(end=start)`` precedes it
        self._looked = monotonic()
        self.moved = False  # the last read() moved to a new instance directory

    def read(self) -> bytes:
        """Everything appended since the last call (b"" when nothing was)."""
        out = bytearray()
        self.moved = False
        if self._fd is not None:
            self._offset = self._copy(out)
        now = self._monotonic()
        if now - self._looked >= RELOOK:
            self._looked = now
            moved = self._find_again()
            if moved != self.where:
                self.where, self.moved = moved, True
                self._reopen()
                return bytes(out) + self.read_rest()
        if self._replaced():
            if self._fd is not None:
                self._offset = self._copy(out)  # the last lines of the old file
            self._reopen()
            self._offset = self._copy(out)
        return bytes(out)

    def read_rest(self) -> bytes:
        out = bytearray()
        if self._fd is not None:
            self._offset = self._copy(out)
        return bytes(out)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _copy(self, out: bytearray) -> int:
        assert self._fd is not None
        size, offset = os.fstat(self._fd).st_size, self._offset
        if size < offset:
            offset = 0  # truncated in place (a pass's copy-and-truncate): from its start
        while offset < size:
            chunk = os.pread(self._fd, min(_BLOCK, size - offset), offset)
            if not chunk:
                break
            out += chunk
            offset += len(chunk)
        return offset

    def _replaced(self) -> bool:
        """Is ``server.log`` now another file than the one open (a spawn renamed the old one)?"""
        try:
            st = os.stat(os.path.join(self.where, serverlog.LOG_NAME), follow_symlinks=False)
        except OSError:
            return False
        if self._fd is None:
            return True
        mine = os.fstat(self._fd)
        return (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev)

    def _reopen(self) -> None:
        self.close()
        self._fd = serverlog.open_readable(self.where)
        self._offset = 0
