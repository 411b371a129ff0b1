"""The git commit of the manifests' checkout, recorded with every pass (SHELL; BEHAVIOUR §8).

``manifests_commit(paths)`` asks ``git`` (through ``programs.run``: our own
PATH and nothing else of the environment, a timeout) for the checkout's
HEAD, and says ``<sha>+dirty`` when the manifests differ from it. A
directory with no ``.git`` above it is not a checkout: git is not run at all
(a cron ``--once`` on plain files pays no process start for it).
"""

from __future__ import annotations

import os
from typing import Sequence

#: Seconds each git command may take (a hung network filesystem must not hang a pass).
GIT_TIMEOUT = 5.0


def manifests_commit(paths: Sequence[str]) -> str | None:
    """The git commit of the manifests' checkout, if they live in one.

    ``<sha>+dirty`` when the manifests differ from that commit (uncommitted
    edits, untracked files): the commit alone would claim what was applied.
    None when they are in no checkout, or git cannot tell.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for path in paths:
        folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
        if not _under_a_checkout(folder):
            continue
        from reconciler.system import programs

        head = programs.run(["git", "-C", folder, "rev-parse", "HEAD"], env=env,
                            timeout=GIT_TIMEOUT)
        if head.returncode is None:
            return None  # no git, or it hung: nothing to record
        if not head.ok:
            continue
        dirty = programs.run(["git", "-C", folder, "status", "--porcelain", "--", "."],
                             env=env, timeout=GIT_TIMEOUT)
        if dirty.returncode is None:
            return None
        commit = head.stdout.decode("utf-8", "replace").strip()
        return f"{commit}+dirty" if dirty.ok and dirty.stdout.strip() else commit
    return None


def _under_a_checkout(folder: str) -> bool:
    """Is there a ``.git`` (directory, or file of a worktree) in ``folder`` or above it?

    Where there is none, git's own discovery would fail too (the environment
    it gets names no GIT_DIR).
    """
    here = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return True
        parent = os.path.dirname(here)
        if parent == here:
            return False
        here = parent
