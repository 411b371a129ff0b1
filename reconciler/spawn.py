"""Launching a managed server process (SHELL; BEHAVIOUR §6).

``spawn(launch)`` starts exactly what the ``Launch`` value says and nothing
more: argv as given, the environment *exactly* ``launch.env`` (cleared, not
merged), stdin ``/dev/null``, stdout and stderr appended to
``<cwd>/server.log``, its own session (so pgid = sid = pid, and a stop can
signal the whole group), core dumps off, and with ``run_as`` the
supplementary groups dropped, then the gid, then the uid (``subprocess``
does them in that order in the child, before exec). Running a managed
server as root without ``run_as`` is refused, as is a program that is not
an absolute, executable file unwritable by group and others ("configured,
never guessed").

Log size. A managed server outlives the reconciler, so whatever writes its
log must too. A log-writer process between a pipe and the file would be a
second process per server that must itself outlive us, whose death would
kill the server with SIGPIPE, and that would have to run with some uid.
Instead the child writes straight to the file, opened ``O_APPEND``, and the
cap is kept like logrotate's ``copytruncate``: at spawn the old log is
rotated by rename (nothing is writing it), and each pass the loop calls
``rotate_log_if_needed(cwd)``, which copies an oversized ``server.log`` to
``server.log.1`` and truncates it in place (``O_APPEND`` makes the child's
next write land at the new end). The cap is therefore soft: the log can
overshoot by what is written between two passes, and lines written between
the copy and the truncate are lost. While no reconciler runs, nothing caps it.

Children and zombies. ``Popen`` objects are kept in a module registry so
that the garbage collector never finalises a running one (that warns and
proves nothing); ``reap()`` polls them without blocking and forgets the
finished ones. A watch daemon calls it every pass (and ``execute.stop``
calls it while waiting), so no zombie outlives a pass; no SIGCHLD handler
is installed. When the reconciler exits its children are re-parented to
init, which reaps them.

The instance directory belongs to the server user; every file in it is
opened relative to a directory descriptor with ``O_NOFOLLOW`` and checked
to be a single-link regular file, so that user cannot turn a root-run
rotation into a write through a planted symlink or hard link.
"""

from __future__ import annotations

import functools
import os
import resource
import stat
import subprocess

import attrs

from reconciler import procs
from reconciler.desired import Launch

LOG_NAME = "server.log"
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_LOG_BACKUPS = 3
_DIR_MODE = 0o750
_LOG_MODE = 0o640
_CHILD_UMASK = 0o027

_children: dict[int, subprocess.Popen] = {}


@attrs.frozen(kw_only=True)
class SpawnResult:
    ok: bool
    pid: int | None = None
    create_time: float | None = None
    error: str = ""


@attrs.frozen(kw_only=True)
class RotateResult:
    rotated: bool
    error: str = ""


def spawn(
    launch: Launch,
    *,
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
    log_backups: int = DEFAULT_LOG_BACKUPS,
) -> SpawnResult:
    """Start the server described by ``launch``; failures are values."""
    refusal = _refusal(launch)
    if refusal:
        return SpawnResult(ok=False, error=refusal)
    try:
        dir_fd = _prepare_dir(launch)
    except OSError as exc:
        return SpawnResult(ok=False, error=f"cannot prepare {launch.cwd}: {exc.strerror or exc}")
    try:
        _rotate_if_over(dir_fd, log_max_bytes, log_backups, by_copy=False)
        log_fd = _open_log(dir_fd, launch)
    except (OSError, _Unsafe) as exc:
        return SpawnResult(ok=False, error=f"cannot open {launch.cwd}/{LOG_NAME}: {_msg(exc)}")
    finally:
        os.close(dir_fd)
    try:
        proc = subprocess.Popen(
            list(launch.argv),
            executable=launch.argv[0],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            cwd=launch.cwd,
            env=dict(launch.env),
            close_fds=True,
            start_new_session=True,
            umask=_CHILD_UMASK,
            preexec_fn=_NO_CORE,
            **_privilege_args(launch),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return SpawnResult(ok=False, error=f"cannot start {launch.argv[0]}: {_msg(exc)}")
    finally:
        os.close(log_fd)
    _children[proc.pid] = proc
    return SpawnResult(ok=True, pid=proc.pid, create_time=procs.create_time(proc.pid))


def reap() -> tuple[tuple[int, int], ...]:
    """Collect exited children without blocking: ``(pid, returncode)`` of each."""
    done = []
    for pid, proc in list(_children.items()):
        code = proc.poll()
        if code is not None:
            del _children[pid]
            done.append((pid, code))
    return tuple(done)


def is_child(pid: int) -> bool:
    """Was ``pid`` spawned by this process and not reaped yet?"""
    return pid in _children


def rotate_log_if_needed(
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
        return RotateResult(rotated=False, error=f"{cwd}: {_msg(exc)}")
    try:
        return RotateResult(rotated=_rotate_if_over(dir_fd, max_bytes, backups, by_copy=True))
    except (OSError, _Unsafe) as exc:
        return RotateResult(rotated=False, error=f"{cwd}/{LOG_NAME}: {_msg(exc)}")
    finally:
        os.close(dir_fd)


# ---------------------------------------------------------------- checks


def _refusal(launch: Launch) -> str:
    """Why this launch may not be spawned, or "" when it may."""
    if not launch.argv:
        return "empty argv"
    run_as = launch.run_as
    euid = os.geteuid()
    if run_as is None and euid == 0:
        return "refusing to run a managed server as root without run_as"
    if run_as is not None:
        if run_as.uid == 0:
            return "refusing run_as uid 0"
        if euid != 0:
            return f"run_as {run_as.uid}:{run_as.gid} needs root; the reconciler runs as uid {euid}"
    if not os.path.isabs(launch.cwd):
        return f"working directory {launch.cwd!r} is not absolute"
    return _program_problem(launch.argv[0])


def _program_problem(program: str) -> str:
    """"configured, never guessed": absolute, a regular executable file, not group/other writable."""
    if not os.path.isabs(program):
        return f"serve program {program!r} is not an absolute path"
    try:
        st = os.stat(program)
    except OSError as exc:
        return f"serve program {program}: {_msg(exc)}"
    if not stat.S_ISREG(st.st_mode):
        return f"serve program {program} is not a regular file"
    if not st.st_mode & 0o111:
        return f"serve program {program} is not executable"
    if st.st_mode & 0o022:
        return f"serve program {program} is writable by group or others (mode {st.st_mode & 0o7777:o})"
    return ""


def _privilege_args(launch: Launch) -> dict:
    if launch.run_as is None:
        return {}
    return {"user": launch.run_as.uid, "group": launch.run_as.gid, "extra_groups": []}


# RLIMIT_CORE is the one thing Popen cannot set natively; it runs in the child
# after the uid drop (lowering a limit needs no privilege). A bound builtin keeps
# the Python run between fork and exec to one C call.
_NO_CORE = functools.partial(resource.setrlimit, resource.RLIMIT_CORE, (0, 0))


# ---------------------------------------------------------------- files


class _Unsafe(Exception):
    """A path in the instance directory is not a plain single-link file."""


def _msg(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _prepare_dir(launch: Launch) -> int:
    """Create ``launch.cwd`` (0750, owned by run_as) and return an fd of it."""
    cwd = launch.cwd.rstrip("/") or "/"
    os.makedirs(os.path.dirname(cwd), mode=0o755, exist_ok=True)
    try:
        os.mkdir(cwd, _DIR_MODE)
    except FileExistsError:
        pass
    dir_fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.chmod(dir_fd, _DIR_MODE)
        if launch.run_as is not None:
            os.chown(dir_fd, launch.run_as.uid, launch.run_as.gid)
    except OSError:
        os.close(dir_fd)
        raise
    return dir_fd


def _open_log(dir_fd: int, launch: Launch) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(LOG_NAME, flags, _LOG_MODE, dir_fd=dir_fd)
    try:
        _check_plain(fd)
        if launch.run_as is not None:
            os.chown(fd, launch.run_as.uid, launch.run_as.gid)
    except (OSError, _Unsafe):
        os.close(fd)
        raise
    return fd


def _check_plain(fd: int) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise _Unsafe("not a single-link regular file")
    return st


def _rotate_if_over(dir_fd: int, max_bytes: int, backups: int, *, by_copy: bool) -> bool:
    """Rotate server.log → .1 → … → .<backups> when it exceeds ``max_bytes``."""
    try:
        st = os.stat(LOG_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise _Unsafe("not a regular file")
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

