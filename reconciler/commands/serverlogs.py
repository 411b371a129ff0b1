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

import attrs

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.desired import Mode
from reconciler.core.exitcodes import Exit
from reconciler.planner import identity
from reconciler.repo import sources
from reconciler.world import instances, logtail, serverlog


@attrs.frozen(kw_only=True)
class LogsOptions:
    name: str
    lines: int = 20
    follow: bool = False


POLL = 0.25  # seconds between looks for new lines when following


def run(g: GlobalOptions, o: LogsOptions) -> int:
    if o.lines < 0:
        print("reconcile: error: -n must be 0 or more", file=sys.stderr)
        return Exit.ERROR
    with common.open_store(g) as store:
        found = _locate(g, o.name, store)
        if isinstance(found, str):
            print(f"reconcile: error: {found}", file=sys.stderr)
            return Exit.ERROR
        where, find_again = found
        if not logtail.has_log(where):
            print(f"reconcile: error: {o.name} has no server log ({where}/"
                  f"{serverlog.LOG_NAME}): its server was never started on this node",
                  file=sys.stderr)
            return Exit.ERROR
        out = sys.stdout.buffer
        # Following starts before the tail is read, and the tail ends where it starts:
        # a line written in between is printed once, not lost.
        follower = logtail.Follower(where, find_again) if o.follow else None
        end = follower.start if follower is not None else None
        out.write(b"".join(logtail.last_lines(where, o.lines, end=end)))
        out.flush()
        if follower is not None:
            follow(where, find_again, out, follower=follower)
    return Exit.OK


def _locate(g: GlobalOptions, name: str, store):
    """``(instance directory, a callable giving it again)``, or why there is none."""
    state_dir = common.state_dir(g)
    loaded = sources.load_desired(common.manifest_paths(g), cache_dir=state_dir,
                                  node=common.node_choice(g))
    desired = loaded.desired if not loaded.problems else None
    if loaded.problems:
        print(f"reconcile: warning: the manifests have {len(loaded.problems)} problem(s); "
              "looking for the log by the state store alone", file=sys.stderr)
    spec = desired.role(name) if desired is not None else None
    record = store.role(name)
    if spec is None and record is None:
        return f"no role {name!r} in the manifests or the state store"
    if (spec.mode if spec is not None else record.mode) is Mode.ADOPTED:
        return (f"{name} is adopted: the reconciler does not run its server and keeps "
                "no log of it")
    root = (instances.data_root(desired, state_dir) if desired is not None
            else os.path.join(state_dir, "instances"))

    def instance() -> str:
        current = store.role(name)
        iid = current.instance_id if current is not None else (
            identity.instance_id(spec) if spec is not None else "")
        return instances.instance_dir(root, iid)

    return instance(), instance


def last_lines(where: str, count: int) -> list[bytes]:
    """The last ``count`` lines of the log, from the rotated files too when needed."""
    return logtail.last_lines(where, count)


def follow(where: str, find_again, out, *, poll: float = POLL,
           until=lambda: False, follower=None) -> None:
    """Print what is appended to ``<where>/server.log``, across rotations and new instances.

    ``until`` ends it (tests); otherwise it runs until interrupted. ``follower``:
    one made earlier (``run`` makes it before reading the tail).
    """
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
