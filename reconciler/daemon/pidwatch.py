"""Exit notification for managed servers through Linux pidfds (SHELL).

``watch`` must notice the moment a managed server exits — also a server an
earlier run (a cron pass, a previous daemon) started, which is not our
child, so SIGCHLD and ``waitpid`` cannot tell. A pidfd (``os.pidfd_open``,
Linux ≥ 5.3) can be opened for any pid and becomes readable when that
process terminates, so the daemon's one ``select`` waits on server exits,
signals, manifest edits and its timers together, without polling.

A pidfd opened for a recycled pid would watch the wrong process, so after
opening it the recorded create time is checked: the pidfd pins the process
it was opened for, so a match then is a match for as long as the fd lives.
Watching needs no ownership check (nothing is signalled here); a process
that is already gone is reported at once, and only once per (pid, create
time), so a store that still names a dead pid cannot make a hot loop.

Where pidfds are unavailable (not Linux, an old kernel) ``ExitWatch`` says
so once and watches nothing; the daemon's resync timer still notices exits.
"""

from __future__ import annotations

import os
import selectors
from typing import Callable, Mapping

from reconciler.world import procs

#: (pid, recorded create time) of one managed server.
Target = tuple[int, "float | None"]
TAG = "exit"


class ExitWatch:
    """pidfds of the servers a daemon watches, registered in the daemon's selector.

    Each registration's ``data`` is ``(TAG, role)``; when it fires, call
    ``exited(role)`` (which closes the pidfd) and run a pass.
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        *,
        is_running: Callable[[int, float | None], bool] = procs.is_running,
    ) -> None:
        self._selector = selector
        self._is_running = is_running
        self._fds: dict[str, tuple[int, Target]] = {}  # role → (pidfd, target)
        self._reported: set[Target] = set()  # already said to be gone
        self.supported = hasattr(os, "pidfd_open")
        self.unsupported_reason = "" if self.supported else "os.pidfd_open is not available"

    @property
    def watched(self) -> dict[str, Target]:
        return {role: target for role, (_, target) in self._fds.items()}

    def sync(self, targets: Mapping[str, Target]) -> tuple[str, ...]:
        """Watch exactly ``targets`` (role → (pid, create time)).

        Returns the roles whose process is already gone (each reported once
        per pid): the caller treats them like a fired pidfd.
        """
        for role in list(self._fds):
            if self._fds[role][1] != targets.get(role):
                self._close(role)
        self._reported &= set(targets.values())
        gone = []
        if not self.supported:
            return ()
        for role, target in sorted(targets.items()):
            if role in self._fds or target in self._reported:
                continue
            pid, ctime = target
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._reported.add(target)
                gone.append(role)
                continue
            except OSError as exc:  # ENOSYS (old kernel), seccomp, fd limits
                self.supported = False
                self.unsupported_reason = f"pidfd_open failed: {exc.strerror or exc}"
                self.close()
                return tuple(gone)
            if not self._is_running(pid, ctime):
                # Recycled pid, a zombie, or gone between the pass and now.
                os.close(fd)
                self._reported.add(target)
                gone.append(role)
                continue
            self._selector.register(fd, selectors.EVENT_READ, (TAG, role))
            self._fds[role] = (fd, target)
        return tuple(gone)

    def exited(self, role: str) -> Target | None:
        """A pidfd fired: stop watching ``role``; returns the (pid, create time) that ended."""
        entry = self._fds.get(role)
        if entry is None:
            return None
        self._reported.add(entry[1])
        self._close(role)
        return entry[1]

    def _close(self, role: str) -> None:
        fd, _ = self._fds.pop(role)
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        os.close(fd)

    def close(self) -> None:
        for role in list(self._fds):
            self._close(role)


def targets_from(records) -> dict[str, Target]:
    """The processes to watch: managed roles the store says are running."""
    out: dict[str, Target] = {}
    for record in records:
        if str(record.mode) == "managed" and record.pid and record.exited_at is None:
            out[record.name] = (record.pid, record.create_time)
    return out
