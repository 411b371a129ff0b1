"""The instance directories: where each managed server works (SHELL; BEHAVIOUR §6).

``<data_root>/<instance id>`` is a managed server's working directory and
holds its ``server.log``. It is created at its spawn (``spawn.py``), its log
is kept under its cap on every pass (``cap_server_logs``), and it goes with
the role's record when the role is forgotten (``remove_dir``). An edit that
changes a role's instance id (its model, host or port) leaves the old
instance's directory behind: ``sweep`` removes it once no role wants that
instance and no live process works in it.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from reconciler.planner import identity
from reconciler.world import procs, serverlog
from reconciler.core.desired import Desired
from reconciler.core.observed import RoleRecord
from reconciler.runtimes import spec_of

#: What ``identity.instance_id`` makes; nothing else under the root is ever removed.
_INSTANCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]*-[0-9a-f]{8}")


def data_root(desired: Desired, state_dir: str) -> str:
    """NodeConfig ``data_root``, else ``<state dir>/instances``."""
    return desired.node.data_root or os.path.join(state_dir, "instances")


def instance_dir(root: str, instance_id: str) -> str:
    """``<data_root>/<instance id>``: a managed server's working directory."""
    return os.path.join(root, instance_id)


def cap_server_logs(records: Iterable[RoleRecord], root: str) -> None:
    """Keep every running server's log under its cap (it grows between passes)."""
    for record in records:
        cwd = os.path.join(root, record.instance_id)
        if record.pid and os.path.isdir(cwd):
            serverlog.rotate_if_needed(cwd)


def remove_dir(root: str, instance_id: str) -> None:
    """A forgotten role's working directory goes with it; never anything outside ``root``."""
    if instance_id and "/" not in instance_id and instance_id not in (".", ".."):
        import shutil  # (bz2, lzma, zlib: only when a directory goes)

        shutil.rmtree(os.path.join(root, instance_id), ignore_errors=True)


def wanted_ids(desired: Desired, records: Iterable[RoleRecord]) -> set[str]:
    """Instances some role wants: each record's, and each desired launched role's current one."""
    wanted = {r.instance_id for r in records}
    wanted |= {identity.instance_id(role) for role in desired.roles
               if role.managed and spec_of(role.runtime).launched}
    return wanted


def sweep(root: str, wanted: set[str]) -> tuple[str, ...]:
    """Remove the instance directories no role wants and no live process works in.

    Runs after the orphan sweep of the pass (their servers are gone by then);
    a directory still in use (a server that would not stop, a foreign
    process) is never removed. Returns the names removed.
    """
    try:
        entries = os.listdir(root)
    except OSError:
        return ()
    stale = [name for name in entries if name not in wanted and _INSTANCE_ID.fullmatch(name)
             and os.path.isdir(os.path.join(root, name))
             and not os.path.islink(os.path.join(root, name))]
    if not stale:
        return ()
    busy = procs.directories_in_use(root)
    gone = tuple(sorted(name for name in stale if name not in busy))
    for name in gone:
        remove_dir(root, name)
    return gone
