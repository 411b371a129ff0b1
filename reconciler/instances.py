"""The instance directories: where each managed server works (SHELL; BEHAVIOUR §6).

``<data_root>/<instance id>`` is a managed server's working directory and
holds its ``server.log``. It is created at its spawn (``spawn.py``), its log
is kept under its cap on every pass (``cap_server_logs``), and it goes with
the role's record when the role is forgotten (``remove_dir``).
"""

from __future__ import annotations

import os
import shutil
from typing import Iterable

from reconciler import serverlog
from reconciler.desired import Desired
from reconciler.observed import RoleRecord


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
        shutil.rmtree(os.path.join(root, instance_id), ignore_errors=True)
