"""``reconcile logs NAME [-n N] [--follow]``: a managed server's own log (SHELL).

The log is ``<data_root>/<instance id>/server.log`` (BEHAVIOUR §6), with its
rotated predecessors ``server.log.1`` … ``.3`` (newest first). The instance is
the one the state store names for the role (the server that runs, or ran
last), else the one its manifest gives (a role not started yet has none).

* ``-n N``: the last N lines, reaching into the rotated files when the live
  one holds fewer;
* ``--follow``: then what is appended, like ``tail -F``: across the
  copy-and-truncate of a pass (the file shrinks: read it from its start), a
  rename at a restart (a new file: read it from its start), and a new
  instance directory (a port or model edit gives the role a new instance id:
  the store says so, and the new directory's log is followed from its start).
  It ends with Ctrl-C.

Files are opened with ``serverlog.open_readable``'s care (no symlink, no
hard link, no FIFO): the instance directory belongs to the server's user.
Exit 1 with one line when the role is unknown or has no log.
"""

from __future__ import annotations

import os
import sys
import time

from reconciler.commands import common
from reconciler.core.exitcodes import Exit

POLL = 0.25  # seconds between looks for new lines when following
_RELOOK = 1.0  # seconds between looks at the store for a new instance
_BLOCK = 65536


def run(args) -> int:
    from reconciler.world import serverlog

    if args.lines < 0:
        print("reconcile: error: -n must be 0 or more", file=sys.stderr)
        return Exit.ERROR
    with common.open_store(args) as store:
        found = _locate(args, store)
        if isinstance(found, str):
            print(f"reconcile: error: {found}", file=sys.stderr)
            return Exit.ERROR
        where, find_again = found
        names = [serverlog.LOG_NAME] + [f"{serverlog.LOG_NAME}.{i}"
                                         for i in range(1, serverlog.DEFAULT_LOG_BACKUPS + 1)]
        if not any(os.path.exists(os.path.join(where, n)) for n in names):
            print(f"reconcile: error: {args.name} has no server log ({where}/"
                  f"{serverlog.LOG_NAME}): its server was never started on this node",
                  file=sys.stderr)
            return Exit.ERROR
        out = sys.stdout.buffer
        out.write(b"".join(last_lines(where, args.lines)))
        out.flush()
        if args.follow:
            follow(where, find_again, out)
    return Exit.OK


def _locate(args, store):
    """``(instance directory, a callable giving it again)``, or why there is none."""
    from reconciler.planner import identity
    from reconciler.world import instances
    from reconciler.repo import sources
    from reconciler.core.desired import Mode

    state_dir = common.state_dir(args)
    loaded = sources.load_desired(common.manifest_paths(args), cache_dir=state_dir,
                                  node=common.node_choice(args))
    desired = loaded.desired if not loaded.problems else None
    if loaded.problems:
        print(f"reconcile: warning: the manifests have {len(loaded.problems)} problem(s); "
              "looking for the log by the state store alone", file=sys.stderr)
    spec = desired.role(args.name) if desired is not None else None
    record = store.role(args.name)
    if spec is None and record is None:
        return f"no role {args.name!r} in the manifests or the state store"
    if (spec.mode if spec is not None else record.mode) is Mode.ADOPTED:
        return (f"{args.name} is adopted: the reconciler does not run its server and keeps "
                "no log of it")
    root = (instances.data_root(desired, state_dir) if desired is not None
            else os.path.join(state_dir, "instances"))

    def instance() -> str:
        current = store.role(args.name)
        iid = current.instance_id if current is not None else (
            identity.instance_id(spec) if spec is not None else "")
        return instances.instance_dir(root, iid)

    return instance(), instance


def last_lines(where: str, count: int) -> list[bytes]:
    """The last ``count`` lines of the log, from the rotated files too when needed."""
    from reconciler.world import serverlog

    lines: list[bytes] = []
    for i in range(serverlog.DEFAULT_LOG_BACKUPS + 1):
        if len(lines) >= count:
            break
        name = serverlog.LOG_NAME if i == 0 else f"{serverlog.LOG_NAME}.{i}"
        fd = serverlog.open_readable(where, name)
        if fd is None:
            continue
        try:
            lines = _tail(fd, count - len(lines)) + lines
        finally:
            os.close(fd)
    return lines[-count:] if count else []


def _tail(fd: int, count: int) -> list[bytes]:
    """The last ``count`` lines of an open file, read backwards a block at a time."""
    if count <= 0:
        return []
    end = os.fstat(fd).st_size
    data, start = b"", end
    while start > 0 and data.count(b"\n") <= count:
        step = min(_BLOCK, start)
        start -= step
        data = os.pread(fd, step, start) + data
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    return lines[-count:]


def follow(where: str, find_again, out, *, poll: float = POLL,
           until=lambda: False) -> None:
    """Print what is appended to ``<where>/server.log``, across rotations and new instances.

    ``until`` ends it (tests); otherwise it runs until interrupted.
    """
    from reconciler.world import serverlog

    fd = serverlog.open_readable(where)
    offset = os.fstat(fd).st_size if fd is not None else 0
    looked = time.monotonic()
    try:
        while not until():
            if fd is not None:
                offset = _copy_new(fd, offset, out)
            now = time.monotonic()
            if now - looked >= _RELOOK:
                looked = now
                moved = find_again()
                if moved != where:
                    where = moved
                    print(f"reconcile: following {where}/{serverlog.LOG_NAME} "
                          "(a new instance of the role)", file=sys.stderr)
                    fd, offset = _reopen(fd, where), 0
                    continue
            fresh = _replaced(fd, where)
            if fresh:
                if fd is not None:
                    _copy_new(fd, offset, out)  # the last lines of the old file
                fd, offset = _reopen(fd, where), 0
                continue
            time.sleep(poll)
    finally:
        if fd is not None:
            os.close(fd)


def _copy_new(fd: int, offset: int, out) -> int:
    size = os.fstat(fd).st_size
    if size < offset:
        offset = 0  # truncated in place (a pass's copy-and-truncate): from its start
    while offset < size:
        chunk = os.pread(fd, min(_BLOCK, size - offset), offset)
        if not chunk:
            break
        out.write(chunk)
        offset += len(chunk)
    out.flush()
    return offset


def _replaced(fd: int | None, where: str) -> bool:
    """Is ``server.log`` now another file than the one open (a spawn renamed the old one)?"""
    try:
        st = os.stat(os.path.join(where, "server.log"), follow_symlinks=False)
    except OSError:
        return False
    if fd is None:
        return True
    mine = os.fstat(fd)
    return (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev)


def _reopen(fd: int | None, where: str) -> int | None:
    from reconciler.world import serverlog

    if fd is not None:
        os.close(fd)
    return serverlog.open_readable(where)
