"""The lock of a state directory: one writer at a time (SHELL; BEHAVIOUR §3).

An exclusive ``flock`` on the state directory and on ``<state dir>/lock``,
held for a whole pass (``--once``, ``start``) or for the daemon's life
(``watch``); the directory's survives an operator removing the lock file. A second run
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

from reconciler.core.errors import LockHeld, StateError


class Lock:
    """Exclusive flocks on the state directory and on ``<state dir>/lock`` (names the holder).

    The directory's flock is the guard that survives the lock *file* being
    removed under a holder: a second run that re-creates the file still finds
    the directory locked. (The file's flock stays for reconcilers that only
    know it.) A holder calls ``check`` each pass: it re-creates a removed lock
    file, and says when the state directory itself is not the one it locked.
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "lock"
        self._fd: int | None = None
        self._dir_fd: int | None = None

    def acquire(self, timeout: float = 0.0, *, poll: float = 0.05) -> None:
        """Take the lock, waiting up to ``timeout``; ``LockHeld`` if another keeps it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StateError(f"lock {self.path}: {exc.strerror or exc}") from None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            os.close(dir_fd)
            raise StateError(f"lock {self.path}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                if _try_flock(dir_fd):
                    if _try_flock(fd):
                        break
                    fcntl.flock(dir_fd, fcntl.LOCK_UN)  # an older reconciler holds the file only
            except OSError as exc:
                os.close(fd)
                os.close(dir_fd)
                raise StateError(f"lock {self.path}: {exc.strerror or exc}") from None
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                os.close(fd)
                os.close(dir_fd)
                who = f"pid {holder}" if holder else "another process"
                raise LockHeld(
                    f"another reconciler holds {self.path} ({who}); "
                    f"waited {timeout:g}s (--lock-timeout)"
                ) from None
            time.sleep(poll)
        _name_holder(fd)
        self._fd, self._dir_fd = fd, dir_fd

    def holder(self) -> int | None:
        """The pid the current (or last) holder wrote into the lock file, if any."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def check(self) -> tuple[str, str]:
        """A holder's look at its lock: ``(lost, restored)``, each "" or one line.

        ``lost``: the state directory was removed or replaced (the one locked is
        gone): this holder must stop writing. ``restored``: the lock file was
        removed and has been re-created, naming us again.
        """
        if self._fd is None or self._dir_fd is None:
            return "", ""
        try:
            now = os.stat(self.path.parent)
        except OSError:
            now = None
        held = os.fstat(self._dir_fd)
        if now is None or (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev):
            return (f"the state directory {self.path.parent} was removed or replaced under this "
                    "reconciler"), ""
        try:
            st = os.stat(self.path, follow_symlinks=False)
            if (st.st_ino, st.st_dev) == (os.fstat(self._fd).st_ino, os.fstat(self._fd).st_dev):
                return "", ""
        except OSError:
            pass
        # Removed (or replaced by a file nobody holds: we hold the directory's flock,
        # so no other reconciler of this kind can): make the lock file name us again.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            return "", f"the lock file {self.path} was removed; re-creating it failed: " + (
                exc.strerror or str(exc))
        if not _try_flock(fd):
            os.close(fd)
            return f"the lock file {self.path} was replaced and another process holds it", ""
        _name_holder(fd)
        os.close(self._fd)
        self._fd = fd
        return "", f"the lock file {self.path} was removed; re-created it (pid {os.getpid()})"

    def release(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd is not None:
                os.close(fd)  # closing drops the flock
        self._fd = self._dir_fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try_flock(fd: int) -> bool:
    """An exclusive flock without waiting: True when taken, False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _name_holder(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""

