"""The platform seam on psutil alone (SHELL; the only module that imports psutil).

Any system psutil supports (Linux, macOS, the BSDs) gets from here:

* the process table (``Processes``): every fact through ``psutil.Process``.
  ``linux.py`` takes it over and replaces only what ``/proc`` answers faster;
* listeners (``Listeners``): ``psutil.net_connections`` in state LISTEN, each
  socket's pid mapped to its process group. Where the table cannot be read
  (macOS without root) it is None, and the observer connects instead (§5);
* exit watching by polling (``pollwatch.PollingExitWatch`` on this table);
* no kernel log (``NoKernelLog``): a post-mortem says what the exit status
  and the server's log say, and no out-of-memory line.

Chosen with ``RECONCILER_PLATFORM=portable`` (the default off Linux;
``choose.py``).
"""

from __future__ import annotations

import os
import socket
from typing import Iterable

import psutil

from reconciler.core import ownership
from reconciler.planner.identity import MARKER_ENV
from reconciler.platform.seam import DENIED, Access, Platform, Seen


def _marker(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(MARKER_ENV)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def _seen(proc: psutil.Process, *, proof: bool = False, marker: bool = True) -> Seen | None:
    """What the table says of a live process: its marker (and, for ``proof``, group, uid, cwd)."""
    try:
        more = dict(pgid=os.getpgid(proc.pid), uid=proc.uids().real, cwd=proc.cwd()) if proof else {}
        return Seen(pid=proc.pid, create_time=proc.create_time(),
                    marker=_marker(proc) if marker or proof else None, **more)
    except (psutil.Error, OSError):
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class Processes:
    """``seam.ProcessTable`` on ``psutil.Process``."""

    def pids(self) -> list[int]:
        return psutil.pids()

    def pgid(self, pid: int) -> int | None:
        return _pgid(pid)

    def cwd(self, pid: int) -> str | None:
        try:
            return psutil.Process(pid).cwd()
        except (psutil.Error, OSError):
            return None

    def create_time(self, pid: int) -> float | None:
        try:
            return psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def recorded(self, pid: int | None, create_time: float | None, *, marker: bool = False,
                 proof: bool = False) -> Seen | Access | None:
        if not pid or create_time is None:
            return None
        try:
            proc = psutil.Process(pid)
            if not ownership.same_start(create_time, proc.create_time()):
                return None  # a recycled pid
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return DENIED
        if not _alive(proc):
            return None
        if marker or proof:
            return _seen(proc, proof=proof)
        return Seen(pid=pid, create_time=proc.create_time(), marker=None)

    def look(self, pid: int, *, proof: bool = False) -> Seen | None:
        try:
            proc = psutil.Process(pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return None
        return _seen(proc, proof=proof) if _alive(proc) else None

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        try:
            return tuple(psutil.Process(pid).cmdline())
        except (psutil.Error, OSError):
            return None

    def environ(self, pid: int) -> dict[str, str] | None:
        try:
            return psutil.Process(pid).environ()
        except (psutil.Error, OSError):
            return None

    def exiting(self, pid: int, create_time: float) -> bool:
        try:
            proc = psutil.Process(pid)
            if not ownership.same_start(create_time, proc.create_time()):
                return False
            return proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() > 1
        except psutil.Error:
            return False

    def rss(self, pid: int) -> int | None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except (psutil.Error, OSError):
            return None

    def boot_time(self) -> float:
        return psutil.boot_time()


def interface_addresses() -> tuple[str, ...]:
    """Every IPv4 and IPv6 address of the machine's interfaces (scope ids dropped), sorted."""
    out = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.add(addr.address.split("%")[0])
    return tuple(sorted(out))


class Listeners:
    """``seam.Listeners`` on ``psutil.net_connections``."""

    def by_group(self, pgids: Iterable[int]) -> dict[int, tuple[str, ...]] | None:
        wanted = set(pgids)
        if not wanted:
            return {}
        try:
            conns = psutil.net_connections(kind="tcp")
        except (psutil.AccessDenied, OSError):
            return None
        found: dict[int, set[str]] = {}
        groups: dict[int, int | None] = {}  # pid → its group, each asked once
        for conn in conns:
            if conn.status != psutil.CONN_LISTEN or not conn.pid or not conn.laddr:
                continue
            if conn.pid not in groups:
                groups[conn.pid] = _pgid(conn.pid)
            group = groups[conn.pid]
            if group in wanted:
                host, port = conn.laddr[0], conn.laddr[1]
                six = conn.family == socket.AF_INET6
                found.setdefault(group, set()).add(f"[{host}]:{port}" if six else f"{host}:{port}")
        return {group: tuple(sorted(addresses)) for group, addresses in found.items()}

    def interface_addresses(self) -> tuple[str, ...]:
        return interface_addresses()


class NoKernelLog:
    """``seam.KernelLog`` where none can be read: no records."""

    def records(self) -> list[str]:
        return []


def platform() -> Platform:
    from reconciler.platform.pollwatch import PollingExitWatch

    processes = Processes()
    return Platform(name="portable", processes=processes, listeners=Listeners(),
                    kernel_log=NoKernelLog(),
                    exit_watch=lambda selector: PollingExitWatch(selector, processes))
