"""A managed server's log file, ``<instance dir>/server.log`` (SHELL; BEHAVIOUR §6).

A managed server outlives the reconciler, so whatever writes its log must
too. A log-writer process between a pipe and the file would be a second
process per server that must itself outlive us, whose death would kill the
server with SIGPIPE, and that would have to run with some uid. Instead the
child writes straight to the file, opened ``O_APPEND`` (``open_for_server``),
and the cap is kept like logrotate's ``copytruncate``: at a spawn the old log
is rotated by rename (nothing is writing it), and each pass calls
``rotate_if_needed(cwd)``, which copies an oversized ``server.log`` to
``server.log.1`` and truncates it in place (``O_APPEND`` makes the child's
next write land at the new end). The cap is therefore soft: the log can
overshoot by what is written between two passes, and lines written between
the copy and the truncate are lost. While no reconciler runs, nothing caps it.

The instance directory belongs to the server user; every file in it is
opened relative to a directory descriptor with ``O_NOFOLLOW`` and checked to
be a single-link regular file, so that user cannot turn a root-run rotation
into a write through a planted symlink or hard link.
"""

from __future__ import annotations

import datetime
import os
import stat

import attrs

from reconciler.core.desired import RunAs
from reconciler.planner.exitreasons import RUN_MARK

LOG_NAME = "server.log"
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_LOG_BACKUPS = 3
_LOG_MODE = 0o640


@attrs.frozen(kw_only=True)
class RotateResult:
    rotated: bool
    error: str = ""


class Unsafe(Exception):
    """A path in the instance directory is not a plain single-link file."""


def rotate_if_needed(
    cwd: str,
    *,
    max_bytes: int = DEFAULT_LOG_MAX_BYTES,
    backups: int = DEFAULT_LOG_BACKUPS,
) -> RotateResult:
    """Copy-and-truncate ``<cwd>/server.log`` when it exceeds ``max_bytes``.

    Safe while the server writes it (it appends); called once per pass.
    """
    try:
        dir_fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return RotateResult(rotated=False)
    except OSError as exc:
        return RotateResult(rotated=False, error=f"{cwd}: {message(exc)}")
    try:
        return RotateResult(rotated=rotate_if_over(dir_fd, max_bytes, backups, by_copy=True))
    except (OSError, Unsafe) as exc:
        return RotateResult(rotated=False, error=f"{cwd}/{LOG_NAME}: {message(exc)}")
    finally:
        os.close(dir_fd)


def open_for_server(dir_fd: int, run_as: RunAs | None) -> int:
    """``server.log`` in the directory ``dir_fd``, opened to append, owned by ``run_as``."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(LOG_NAME, flags, _LOG_MODE, dir_fd=dir_fd)
    try:
        _check_plain(fd)
        if run_as is not None:
            os.chown(fd, run_as.uid, run_as.gid)
    except (OSError, Unsafe):
        os.close(fd)
        raise
    return fd


def mark_run(fd: int, program: str) -> None:
    """Before a server starts on a log an earlier one wrote: a line saying where it begins.

    ``status`` reads why a server ended from its own lines only (``exitreasons.tail_lines``),
    and ``reconcile logs`` shows where each run starts. An empty log needs no mark.
    """
    if os.fstat(fd).st_size == 0:
        return
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.write(fd, f"{RUN_MARK}{when}: starting {os.path.basename(program)} ---\n".encode())


def open_readable(cwd: str, name: str = LOG_NAME) -> int | None:
    """``<cwd>/<name>`` opened to read, or None when there is no such plain file.

    The same care as a write: no symlink (``O_NOFOLLOW`` relative to the
    directory, itself not a symlink), a regular single-link file (a hard link
    the server's user made to a file it may not read must not be shown to it
    by a root-run reconciler), and ``O_NONBLOCK`` so a FIFO cannot hang us.
    """
    try:
        dir_fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        _check_plain(fd)
    except (OSError, Unsafe):
        os.close(fd)
        return None
    return fd


def tail(cwd: str, name: str = LOG_NAME, *, max_bytes: int = 16384) -> bytes | None:
    """The last ``max_bytes`` of ``<cwd>/<name>`` (``open_readable``'s rules), or None."""
    fd = open_readable(cwd, name)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, max_bytes, max(0, size - max_bytes))
    except OSError:
        return None
    finally:
        os.close(fd)


def message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _check_plain(fd: int) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise Unsafe("not a single-link regular file")
    return st


def rotate_if_over(dir_fd: int, max_bytes: int, backups: int, *, by_copy: bool) -> bool:
    """Rotate server.log → .1 → … → .<backups> when it exceeds ``max_bytes``."""
    try:
        st = os.stat(LOG_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise Unsafe("not a regular file")
    if st.st_size <= max_bytes:
        return False
    for i in range(backups - 1, 0, -1):
        try:
            os.rename(f"{LOG_NAME}.{i}", f"{LOG_NAME}.{i + 1}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileNotFoundError:
            pass
    if backups <= 0:
        _truncate(dir_fd)
    elif by_copy:
        _copy(dir_fd, f"{LOG_NAME}.1")
        _truncate(dir_fd)
    else:
        os.rename(LOG_NAME, f"{LOG_NAME}.1", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return True


def _truncate(dir_fd: int) -> None:
    fd = os.open(LOG_NAME, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        _check_plain(fd)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _copy(dir_fd: int, dest: str) -> None:
    src = os.open(LOG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = _check_plain(src)
        try:
            os.unlink(dest, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(dest, flags, _LOG_MODE, dir_fd=dir_fd)
        try:
            os.fchown(dst, st.st_uid, st.st_gid)
            remaining = st.st_size
            while remaining > 0:
                chunk = os.read(src, min(remaining, 1 << 20))
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
                remaining -= len(chunk)
        finally:
            os.close(dst)
    finally:
        os.close(src)

