"""The lock of a state directory: one writer at a time (SHELL; BEHAVIOUR §3).

An exclusive ``flock`` on ``<state dir>/lock``, held for a whole pass
(``--once``, ``start``) or for the daemon's life (``watch``). A second run
waits up to ``--lock-timeout`` and then gets ``errors.LockHeld`` naming the
holder's pid, which the holder writes into the file once it has the lock
(``reconcile start`` reads it to hand its start to a running daemon). A lock
file that cannot be made or opened is an ``errors.StateError``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from reconciler.errors import LockHeld, StateError


class Lock:
    """An exclusive flock on ``<state dir>/lock``; the file names the holder's pid."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "lock"
        self._fd: int | None = None

    def acquire(self, timeout: float = 0.0, *, poll: float = 0.05) -> None:
        """Take the lock, waiting up to ``timeout``; ``LockHeld`` if another keeps it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"lock {self.path}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise StateError(f"lock {self.path}: {exc.strerror or exc}") from None
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    who = f"pid {holder}" if holder else "another process"
                    raise LockHeld(
                        f"another reconciler holds {self.path} ({who}); "
                        f"waited {timeout:g}s (--lock-timeout)"
                    ) from None
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def holder(self) -> int | None:
        """The pid the current (or last) holder wrote into the lock file, if any."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""

