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

The reading is ``world/logtail.py``'s (the status page follows a log the same
way): files are opened with ``serverlog.open_readable``'s care (no symlink, no
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


def run(args) -> int:
    from reconciler.world import logtail, serverlog

    if args.lines < 0:
        print("reconcile: error: -n must be 0 or more", file=sys.stderr)
        return Exit.ERROR
    with common.open_store(args) as store:
        found = _locate(args, store)
        if isinstance(found, str):
            print(f"reconcile: error: {found}", file=sys.stderr)
            return Exit.ERROR
        where, find_again = found
        if not logtail.has_log(where):
            print(f"reconcile: error: {args.name} has no server log ({where}/"
                  f"{serverlog.LOG_NAME}): its server was never started on this node",
                  file=sys.stderr)
            return Exit.ERROR
        out = sys.stdout.buffer
        # Following starts before the tail is read, and the tail ends where it starts:
        # a line written in between is printed once, not lost.
        follower = logtail.Follower(where, find_again) if args.follow else None
        end = follower.start if follower is not None else None
        out.write(b"".join(logtail.last_lines(where, args.lines, end=end)))
        out.flush()
        if follower is not None:
            follow(where, find_again, out, follower=follower)
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
    from reconciler.world import logtail

    return logtail.last_lines(where, count)


def follow(where: str, find_again, out, *, poll: float = POLL,
           until=lambda: False, follower=None) -> None:
    """Print what is appended to ``<where>/server.log``, across rotations and new instances.

    ``until`` ends it (tests); otherwise it runs until interrupted. ``follower``:
    one made earlier (``run`` makes it before reading the tail).
    """
    from reconciler.world import logtail, serverlog

    follower = follower or logtail.Follower(where, find_again)
    try:
        while not until():
            chunk = follower.read()
            if follower.moved:
                print(f"reconcile: following {follower.where}/{serverlog.LOG_NAME} "
                      "(a new instance of the role)", file=sys.stderr)
            if chunk:
                out.write(chunk)
                out.flush()
            else:
                time.sleep(poll)
    finally:
        follower.close()
