"""Launching a managed server process (SHELL; BEHAVIOUR §6).

``spawn(launch)`` starts exactly what the ``Launch`` value says and nothing
more: argv as given, the environment *exactly* ``launch.env`` (cleared, not
merged), stdin ``/dev/null``, stdout and stderr appended to
``<cwd>/server.log`` (``serverlog.py``: its rotation and the rules that keep
a server user from redirecting a root-run write), its own session (so pgid =
sid = pid, and a stop can signal the whole group), core dumps off, and with
``run_as`` the privileges dropped (``programs.start``). Running a managed
server as root without ``run_as`` is refused, as is a program that is not an
absolute, executable file unwritable by group and others ("configured, never
guessed").

The working directory ``<data_root>/<id>`` is created 0750 and given to the
``run_as`` user; its old log is rotated by rename before the child opens a
new one. The children themselves are ``programs.py``'s: ``programs.reap()``
collects the exited ones.
"""

from __future__ import annotations

import functools
import os
import resource
import stat

import attrs

from reconciler.world import procs, serverlog
from reconciler.system import programs
from reconciler.core.desired import Launch

_DIR_MODE = 0o750
_CHILD_UMASK = 0o027


@attrs.frozen(kw_only=True)
class SpawnResult:
    ok: bool
    pid: int | None = None
    create_time: float | None = None
    error: str = ""


def spawn(
    launch: Launch,
    *,
    log_max_bytes: int = serverlog.DEFAULT_LOG_MAX_BYTES,
    log_backups: int = serverlog.DEFAULT_LOG_BACKUPS,
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
        serverlog.rotate_if_over(dir_fd, log_max_bytes, log_backups, by_copy=False)
        log_fd = serverlog.open_for_server(dir_fd, launch.run_as)
        serverlog.mark_run(log_fd, launch.argv[0])
    except (OSError, serverlog.Unsafe) as exc:
        os.close(dir_fd)
        return SpawnResult(ok=False, error=(
            f"cannot open {launch.cwd}/{serverlog.LOG_NAME}: {serverlog.message(exc)}"))
    try:
        _copy_files(dir_fd, launch)
        _make_dirs(dir_fd, launch)
    except OSError as exc:
        os.close(log_fd)
        return SpawnResult(ok=False, error=(
            f"cannot copy repository files into {launch.cwd}: {serverlog.message(exc)}"))
    finally:
        os.close(dir_fd)
    try:
        started = programs.start(
            launch.argv, env=dict(launch.env), cwd=launch.cwd, output=log_fd,
            run_as=launch.run_as, umask=_CHILD_UMASK, in_child=_NO_CORE,
        )
    finally:
        os.close(log_fd)
    if started.pid is None:
        return SpawnResult(ok=False, error=f"cannot start {launch.argv[0]}: {started.failure}")
    created = procs.create_time(started.pid)
    programs.note_create_time(started.pid, created)  # what exit_status compares with
    return SpawnResult(ok=True, pid=started.pid, create_time=created)


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
        return f"serve program {program}: {serverlog.message(exc)}"
    if not stat.S_ISREG(st.st_mode):
        return f"serve program {program} is not a regular file"
    if not st.st_mode & 0o111:
        return f"serve program {program} is not executable"
    if st.st_mode & 0o022:
        return f"serve program {program} is writable by group or others (mode {st.st_mode & 0o7777:o})"
    return ""


# RLIMIT_CORE is the one thing Popen cannot set natively; it runs in the child
# after the uid drop (lowering a limit needs no privilege). A bound builtin keeps
# the Python run between fork and exec to one C call.
_NO_CORE = functools.partial(resource.setrlimit, resource.RLIMIT_CORE, (0, 0))


# ---------------------------------------------------------------- the directory


def _make_dirs(dir_fd: int, launch: Launch) -> None:
    """The directories the server writes into (``Launch.dirs``), owned by its uid, 0750."""
    for name in launch.dirs:
        if "/" in name or name in ("", ".", "..", "files"):
            raise OSError(f"not a directory name: {name!r}")
        try:
            os.mkdir(name, _DIR_MODE, dir_fd=dir_fd)
        except FileExistsError:
            pass
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            os.chmod(fd, _DIR_MODE)
            if launch.run_as is not None:
                os.chown(fd, launch.run_as.uid, launch.run_as.gid)
        finally:
            os.close(fd)


def _copy_files(dir_fd: int, launch: Launch) -> None:
    """BEHAVIOUR §1.4: the repository files a launch reads, copied into ``files/`` of its
    instance directory (root-owned, readable), so the server never reads the repository.
    Never through a symlink: the server's uid owns the instance directory."""
    if not launch.files:
        return
    try:
        os.mkdir("files", 0o755, dir_fd=dir_fd)
    except FileExistsError:
        pass
    files_fd = os.open("files", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=dir_fd)
    try:
        os.chmod(files_fd, 0o755)
        for relative, data in launch.files:
            name = relative.removeprefix("files/")
            if "/" in name or name in ("", ".", ".."):
                raise OSError(f"not a file name: {relative!r}")
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644, dir_fd=files_fd)
            try:
                os.fchmod(fd, 0o644)
                os.write(fd, data)
            finally:
                os.close(fd)
    finally:
        os.close(files_fd)


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
