"""The process table (SHELL; the only module that imports psutil).

Ownership is the safety rule everything else leans on (BEHAVIOUR §3): a
process is ours only when the pid the store recorded is alive, its create
time matches the recorded one, and its environment carries our
``RECONCILER_INSTANCE`` marker. A recycled pid fails the create time; a
foreign server on our port fails all three. This module reads the facts
(``ownership.Seen``); the rules themselves are ``core/ownership.py``'s
(``owned``, and ``proven`` for a process no record names).

Size: the only owner of psutil, with the /proc parsing of listeners and of the
facts ``is_owned`` reads (the observer asks it of every recorded server every
pass): every process-table fact (listeners, markers, the facts the ownership
proof reads) comes through here.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Callable, Iterable

import psutil

from reconciler.core import loopback, ownership
from reconciler.world.listeners import listening_inodes
from reconciler.core.ownership import MARKER_ENV
from reconciler.core.observed import ProcessFacts


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


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


_DENIED = object()  # the process exists but may not be inspected


def _recorded(pid: int | None, recorded_create_time: float | None):
    """The live process at a recorded pid with the recorded create time, else None."""
    if not pid or recorded_create_time is None:
        return None
    try:
        proc = psutil.Process(pid)
        if not ownership.same_start(recorded_create_time, proc.create_time()):
            return None  # a recycled pid
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return _DENIED
    return proc if _alive(proc) else None


def _seen(proc: psutil.Process, *, proof: bool = False) -> ownership.Seen | None:
    """What the table says of a live process: its marker (and, for ``proof``, group, uid, cwd)."""
    try:
        more = dict(pgid=os.getpgid(proc.pid), uid=proc.uids().real, cwd=proc.cwd()) if proof else {}
        return ownership.Seen(pid=proc.pid, create_time=proc.create_time(),
                              marker=_marker(proc), **more)
    except (psutil.Error, OSError):
        return None


def is_owned(pid: int | None, recorded_create_time: float | None, instance_id: str) -> bool:
    """pid + create time + marker (``ownership.owned``): the check made before every signal."""
    if _PROC and pid and recorded_create_time is not None:
        return ownership.owned(_owned_seen(pid, recorded_create_time), pid,
                               recorded_create_time, instance_id)
    proc = _recorded(pid, recorded_create_time)
    if proc is None or proc is _DENIED:
        return False
    return ownership.owned(_seen(proc), pid, recorded_create_time, instance_id)


# What ``is_owned`` reads, straight from /proc where there is one: psutil's way (a
# Process, is_running, status, environ) read the stat file three times and the boot
# time once per process, ~4x the CPU of these reads (the observer asks it of every
# recorded server every pass).
_PROC = os.path.exists("/proc/self/stat")
_TICKS = os.sysconf("SC_CLK_TCK") if _PROC else 100  # a start in /proc/<pid>/stat counts these
_BOOT: list[float] = [0.0, -1.0]  # boot time, and when (monotonic) it was read


def _boot_time() -> float:
    """``psutil.boot_time()`` read at most once a second (the passes' many processes share it;
    it moves only with a step of the wall clock, as psutil's own create times do)."""
    now = time.monotonic()
    if _BOOT[1] < 0 or now - _BOOT[1] > 1.0:
        _BOOT[:] = [psutil.boot_time(), now]
    return _BOOT[0]


def _stat(pid: int) -> tuple[bytes, bytes]:
    """(state letter, start in clock ticks since boot) of ``pid``: ``/proc/<pid>/stat`` as
    psutil parses it (its create time is the start / ticks + the boot time)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rfind(b")") + 2:].split()
    return fields[0], fields[19]


def _environ_marker(pid: int) -> str | None:
    """``RECONCILER_INSTANCE`` in ``/proc/<pid>/environ``, parsed as psutil's ``environ()``
    parses it (entries up to the first empty one, the last of a name counts); None: absent."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    key, found = MARKER_ENV.encode() + b"=", None
    for entry in data.split(b"\0")[:-1]:
        if not entry:
            break
        if entry.startswith(key):
            found = entry[len(key):]
    return os.fsdecode(found) if found is not None else None


def _owned_seen(pid: int, recorded_create_time: float) -> ownership.Seen | None:
    """What ``owned`` reads of the live process at a recorded pid; None: gone, a zombie,
    unreadable, or a recycled pid (whose environment is never read).

    The stat line is read again after the environment: the marker counts only when the
    process that carried it is still the recorded one (same create time, not a zombie).
    """
    try:
        state, start = _stat(pid)
        created = float(start) / _TICKS + _boot_time()
        if state == b"Z" or not ownership.same_start(recorded_create_time, created):
            return None
        marker = _environ_marker(pid)
        state, again = _stat(pid)
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile, or not ours to read
    if state == b"Z" or again != start:
        return None
    return ownership.Seen(pid=pid, create_time=created, marker=marker)


def process_facts(
    pid: int | None, recorded_create_time: float | None, instance_id: str,
    listeners: dict[int, tuple[str, ...]] | None = None,
) -> ProcessFacts | None:
    """What the table says about a recorded pid; None when nothing was recorded.

    ``listeners`` is a ``listeners_by_group()`` snapshot shared by all roles of
    a pass (reading the socket table costs ~15 ms; once per pass, not per role).
    """
    if not pid:
        return None
    ctime = recorded_create_time or 0.0
    owned = is_owned(pid, recorded_create_time, instance_id)
    if not owned:
        listen: tuple[str, ...] = ()
    elif listeners is not None:
        listen = listeners.get(pid, ())
    else:
        listen = listening_addresses(pid)
    return ProcessFacts(pid=pid, create_time=ctime, alive=owned, owned=owned, listen=listen)


def listeners_by_group(pgids: Iterable[int]) -> dict[int, tuple[str, ...]] | None:
    """The TCP listeners of the given process groups, ``host:port`` strings by group.

    Asks the kernel for its LISTEN sockets only (``listeners.py``), then reads
    the fds of the groups' own members — not every socket and every fd on the
    machine, as a full socket table would (thousands of TIME_WAIT sockets made
    that cost hundreds of ms a pass). None when it cannot be read (not root): only then
    does the observer fall back to connecting to interface addresses (§5).
    """
    wanted = set(pgids)
    if not wanted:
        return {}
    try:
        by_inode = listening_inodes()
    except OSError:
        return None
    members: dict[int, list[int]] = {}
    for pid in _all_pids():
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


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def group_pids(pgid: int) -> list[int]:
    """Every live process in a process group (our servers lead their own)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return out


def listening_addresses(pgid: int) -> tuple[str, ...]:
    """``host:port`` of every TCP listener held by the process group, sorted."""
    found = listeners_by_group([pgid])
    return () if not found else found.get(pgid, ())


def find_ours(root: str, uid: int, known: Callable[[int, float], bool] | None = None,
              ) -> list[tuple[int, float, str, tuple[str, ...], dict[str, str]]]:
    """Every live process that proves itself ours on this node: leader, uid, cwd, marker.

    Ours means what ``spawn`` makes (BEHAVIOUR §3, §4 orphans): it leads its
    own process group, its real uid is ``uid``, its working directory is
    exactly ``<root>/<instance id>`` of this node's data root, and it carries
    ``RECONCILER_INSTANCE=<that instance id>``. Another reconciler's servers
    (another data root) and a process with a forged marker but the wrong
    uid, directory or group all fail. The cheap tests come first (the group,
    the directory), so a pass reads the environment of almost no process.
    ``known(pid, create_time)``: a process it says yes to (a record names it)
    is passed over before the proof is read. Each hit: pid, create time,
    instance id, cmdline, environment.
    """
    out = []
    for pid in _all_pids():
        try:
            if not ownership.leads_group(pid, os.getpgid(pid)):
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # gone, or not ours to look at
        if ownership.instance_in(root, cwd) is None:
            continue
        try:
            proc = psutil.Process(pid)
            if known is not None and known(pid, proc.create_time()):
                continue
            seen = _seen(proc, proof=True) if _alive(proc) else None
            instance = ownership.proven(seen, root, uid) if seen is not None else None
            if instance is None or seen.cwd != cwd:
                continue
            out.append((pid, seen.create_time, instance, tuple(proc.cmdline()),
                        proc.environ()))
        except (psutil.Error, OSError):
            continue
    return out


def proves_ours(pid: int, create_time: float, instance_id: str, root: str, uid: int) -> bool:
    """The proof ``find_ours`` asks, for one recorded pid (checked again before an orphan's stop)."""
    proc = _recorded(pid, create_time)
    if proc is None or proc is _DENIED:
        return False
    seen = _seen(proc, proof=True)
    return (ownership.owned(seen, pid, create_time, instance_id) and seen is not None
            and ownership.proven(seen, root, uid) == instance_id)


def directories_in_use(root: str) -> set[str]:
    """The entries of ``root`` that some live process works in (or below)."""
    prefix = root.rstrip("/") + "/"
    used = set()
    for pid in _all_pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(prefix):
            used.add(cwd[len(prefix):].split("/", 1)[0])
    return used


def accepts_connections(host: str, port: int, timeout: float = 0.3) -> bool:
    """A plain TCP connect, no bytes sent: is anything listening there?"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except OSError:
            return False
        return True


def boot_time() -> float:
    """When this machine booted (unix time): kernel log times count from it."""
    return psutil.boot_time()


def interface_addresses() -> tuple[str, ...]:
    """Non-loopback addresses of this machine's interfaces (for the §5 fallback)."""
    out = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                ip = addr.address.split("%")[0]
                if not loopback.is_loopback_host(ip):
                    out.append(ip)
    return tuple(sorted(set(out)))


def rss(pid: int) -> int | None:
    """The resident memory of ``pid`` in bytes (the status page's observed use); None: unknown."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


def is_running(pid: int | None, recorded_create_time: float | None) -> bool:
    """Is the recorded process (pid + create time) still alive and not a zombie?

    Unlike ``is_owned`` this ignores the marker: it answers "is it really
    gone?" (memory may be released), not "may we signal it?". A process we
    may not inspect counts as running: it is not known to be gone.
    """
    return _recorded(pid, recorded_create_time) is not None


def exiting(pid: int | None, recorded_create_time: float | None) -> bool:
    """Is the recorded process a zombie leader whose other threads are still exiting?

    A killed multi-threaded process shows its leader as a zombie before the
    last thread is gone; until then that thread still holds the process's
    memory and file descriptors, so its listening socket keeps accepting
    (measured with mlx_lm.server: ~10 ms). It is not really gone yet.
    """
    if not pid or recorded_create_time is None:
        return False
    try:
        proc = psutil.Process(pid)
        if not ownership.same_start(recorded_create_time, proc.create_time()):
            return False
        return proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() > 1
    except psutil.Error:
        return False


def marker_of(pid: int) -> str | None:
    """The ``RECONCILER_INSTANCE`` marker in a live process's environment, if any."""
    try:
        proc = psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    return _marker(proc) if _alive(proc) else None


def looks_like_watch(pid: int | None) -> bool:
    """Is ``pid`` alive and does its command line run ``reconcile … watch``?

    ``reconcile start`` reads the lock holder's pid from the lock file and
    signals it (SIGHUP) only when this says yes; a pid recycled by some
    other program, or a ``--once`` run holding the lock, is left alone.
    """
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if not _alive(proc):
            return False
        argv = proc.cmdline()
    except (psutil.Error, OSError):
        return False
    runs_us = any(os.path.basename(word) in ("reconcile", "reconciler") for word in argv)
    return runs_us and "watch" in argv[1:]
