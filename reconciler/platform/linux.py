"""The platform seam on Linux: ``/proc``, sock_diag netlink, pidfds, ``/dev/kmsg`` (SHELL).

The default on Linux (``choose.py``; ``RECONCILER_PLATFORM=linux``):

* the process table is ``portable.Processes`` (psutil) with ``/proc`` read
  directly where that is cheaper: the pid list and a process's working
  directory (the orphan survey reads both for every process, every pass), and
  a recorded server's ownership facts (the observer's, for every recorded
  server every pass: the stat line, the environment, the stat line again);
* listeners: the kernel's LISTEN sockets by inode from one sock_diag dump
  (``sockdiag.py``; ``/proc/net/tcp`` when netlink is refused), matched
  against the fds of the wanted groups' members only;
* exit watching through pidfds (``PidfdExitWatch``), one per server in the
  daemon's selector;
* the kernel log from ``/dev/kmsg`` (``Kmsg``), when this process may read it.
"""

from __future__ import annotations

import errno
import os
import selectors
import time
from typing import Any, Callable, Iterable, Mapping

from reconciler.core.ownership import Seen
from reconciler.platform import portable, procfs, sockdiag
from reconciler.platform.seam import TAG, Access, Platform, Target

KMSG = "/dev/kmsg"
_KMSG_MAX_BYTES = 8 * 1024 * 1024  # the kernel ring buffer is far smaller
_KMSG_MAX_SECONDS = 0.5


class Processes(portable.Processes):
    """``seam.ProcessTable``: psutil's facts, the pid list, cwd and a recorded server's
    ownership facts straight from ``/proc``."""

    def recorded(self, pid: int | None, create_time: float | None, *, marker: bool = False,
                 proof: bool = False) -> Seen | Access | None:
        # The observer asks this (with the marker) of every recorded server every pass:
        # read /proc directly (``procfs.owned_seen``), not psutil's five reads.
        if marker and not proof and pid and create_time is not None:
            return procfs.owned_seen(pid, create_time)
        return super().recorded(pid, create_time, marker=marker, proof=proof)

    def pids(self) -> list[int]:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]

    def cwd(self, pid: int) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return None  # gone, or not ours to look at


class Listeners:
    """``seam.Listeners``: sock_diag's LISTEN sockets, matched to the groups' fds in ``/proc``."""

    def __init__(self, pids: Callable[[], list[int]] = Processes().pids) -> None:
        self._pids = pids

    def by_group(self, pgids: Iterable[int]) -> dict[int, tuple[str, ...]] | None:
        """Asks the kernel for its LISTEN sockets only, then reads the fds of the groups'
        own members — not every socket and every fd on the machine, as a full socket
        table would (thousands of TIME_WAIT sockets made that cost hundreds of ms a pass).
        """
        wanted = set(pgids)
        if not wanted:
            return {}
        try:
            by_inode = sockdiag.listening_inodes()
        except OSError:
            return None
        members: dict[int, list[int]] = {}
        for pid in self._pids():
            try:
                pgid = os.getpgid(pid)
            except (ProcessLookupError, PermissionError):
                continue
            if pgid in wanted:
                members.setdefault(pgid, []).append(pid)
        out: dict[int, tuple[str, ...]] = {}
        for pgid, pids in members.items():
            found = set()
            for pid in pids:
                try:
                    fds = os.listdir(f"/proc/{pid}/fd")
                except FileNotFoundError:
                    continue  # gone meanwhile
                except PermissionError:
                    return None
                for fd in fds:
                    try:
                        link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    except OSError:
                        continue
                    if link.startswith("socket:["):
                        addr = by_inode.get(link[8:-1])
                        if addr:
                            found.add(addr)
            out[pgid] = tuple(sorted(found))
        return out

    def interface_addresses(self) -> tuple[str, ...]:
        return portable.interface_addresses()


class PidfdExitWatch:
    """``seam.ExitWatch`` on pidfds, each registered in the daemon's selector.

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

    Where pidfds are unavailable (an old kernel, seccomp) it says so once and
    watches nothing; the daemon's resync timer still notices exits.
    Each registration's ``data`` is ``(TAG, role)``.
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        *,
        is_running: Callable[[int, float | None], bool] | None = None,
    ) -> None:
        self._selector = selector
        self._is_running = is_running or _is_running
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

    def fired(self, data: Any) -> tuple[tuple[str, Target], ...]:
        role = data[1]
        ended = self.exited(role)
        return () if ended is None else ((role, ended),)

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


def _is_running(pid: int, create_time: float | None) -> bool:
    return _PROCESSES.recorded(pid, create_time) is not None


class Kmsg:
    """``seam.KernelLog`` from ``/dev/kmsg`` (root, or ``kernel.dmesg_restrict=0``)."""

    def __init__(self, path: str = KMSG) -> None:
        self.path = path

    def records(self) -> list[str]:
        """Every record /dev/kmsg still holds (one ``read`` is one record); [] when unreadable."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        records: list[str] = []
        total, deadline = 0, time.monotonic() + _KMSG_MAX_SECONDS
        try:
            while total < _KMSG_MAX_BYTES and time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 16384)
                except BlockingIOError:
                    break  # read everything there is
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        continue  # records were overwritten under us: the next one follows
                    break  # EPERM (dmesg_restrict), EINVAL: nothing more to learn here
                if not chunk:
                    break
                total += len(chunk)
                records.append(chunk.decode("utf-8", "replace"))
        finally:
            os.close(fd)
        return records


_PROCESSES = Processes()


def platform() -> Platform:
    return Platform(name="linux", processes=_PROCESSES, listeners=Listeners(_PROCESSES.pids),
                    kernel_log=Kmsg(), exit_watch=PidfdExitWatch)
