"""The process table, judged (SHELL): ownership's rules asked of the platform's facts.

Ownership is the safety rule everything else leans on (BEHAVIOUR §3): a
process is ours only when the pid the store recorded is alive, its create
time matches the recorded one, and its environment carries our
``RECONCILER_INSTANCE`` marker. A recycled pid fails the create time; a
foreign server on our port fails all three. The facts (``ownership.Seen``)
come from the platform seam (``platform/seam.ProcessTable``: ``/proc`` and
psutil on Linux, psutil alone elsewhere; ``RECONCILER_PLATFORM``); the rules
themselves are ``core/ownership.py``'s (``owned``, and ``proven`` for a
process no record names). This module puts the two together for every
caller: the executor's stops, the observer, re-adoption, the hand-over.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Iterable

from reconciler.core import loopback, ownership
from reconciler.core.observed import ProcessFacts
from reconciler.platform import choose
from reconciler.platform.seam import DENIED


def _table():
    return choose.current().processes


def create_time(pid: int) -> float | None:
    """When the process now at ``pid`` started; None: gone or not readable."""
    return _table().create_time(pid)


def is_owned(pid: int | None, recorded_create_time: float | None, instance_id: str) -> bool:
    """pid + create time + marker (``ownership.owned``): the check made before every signal."""
    seen = _table().recorded(pid, recorded_create_time, marker=True)
    if seen is None or seen is DENIED:
        return False
    return ownership.owned(seen, pid, recorded_create_time, instance_id)


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

    The platform's ``Listeners`` (Linux: the kernel's LISTEN sockets from one
    sock_diag dump, matched against the groups' own fds). None when it cannot
    be read (not root): only then does the observer fall back to connecting to
    interface addresses (§5).
    """
    return choose.current().listeners.by_group(pgids)


def group_pids(pgid: int) -> list[int]:
    """Every live process in a process group (our servers lead their own)."""
    table = _table()
    return [pid for pid in table.pids() if table.pgid(pid) == pgid]


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
    table = _table()
    for pid in table.pids():
        if not ownership.leads_group(pid, table.pgid(pid)):
            continue
        cwd = table.cwd(pid)
        if cwd is None or ownership.instance_in(root, cwd) is None:
            continue  # gone, not ours to look at, or not in our root
        created = table.create_time(pid)
        if created is None or known is not None and known(pid, created):
            continue
        seen = table.look(pid, proof=True)
        instance = ownership.proven(seen, root, uid) if seen is not None else None
        if instance is None or seen.cwd != cwd:
            continue
        cmdline, environ = table.cmdline(pid), table.environ(pid)
        if cmdline is None or environ is None:
            continue
        out.append((pid, seen.create_time, instance, cmdline, environ))
    return out


def proves_ours(pid: int, create_time: float, instance_id: str, root: str, uid: int) -> bool:
    """The proof ``find_ours`` asks, for one recorded pid (checked again before an orphan's stop)."""
    seen = _table().recorded(pid, create_time, proof=True)
    if seen is None or seen is DENIED:
        return False
    return (ownership.owned(seen, pid, create_time, instance_id)
            and ownership.proven(seen, root, uid) == instance_id)


def directories_in_use(root: str) -> set[str]:
    """The entries of ``root`` that some live process works in (or below)."""
    prefix = root.rstrip("/") + "/"
    used = set()
    table = _table()
    for pid in table.pids():
        cwd = table.cwd(pid)
        if cwd is not None and cwd.startswith(prefix):
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
    return _table().boot_time()


def interface_addresses() -> tuple[str, ...]:
    """Non-loopback addresses of this machine's interfaces (for the §5 fallback)."""
    return tuple(ip for ip in choose.current().listeners.interface_addresses()
                 if not loopback.is_loopback_host(ip))


def rss(pid: int) -> int | None:
    """The resident memory of ``pid`` in bytes (the status page's observed use); None: unknown."""
    return _table().rss(pid)


def is_running(pid: int | None, recorded_create_time: float | None) -> bool:
    """Is the recorded process (pid + create time) still alive and not a zombie?

    Unlike ``is_owned`` this ignores the marker: it answers "is it really
    gone?" (memory may be released), not "may we signal it?". A process we
    may not inspect counts as running: it is not known to be gone.
    """
    return _table().recorded(pid, recorded_create_time) is not None


def exiting(pid: int | None, recorded_create_time: float | None) -> bool:
    """Is the recorded process a zombie leader whose other threads are still exiting?

    A killed multi-threaded process shows its leader as a zombie before the
    last thread is gone; until then that thread still holds the process's
    memory and file descriptors, so its listening socket keeps accepting
    (measured with mlx_lm.server: ~10 ms). It is not really gone yet.
    """
    if not pid or recorded_create_time is None:
        return False
    return _table().exiting(pid, recorded_create_time)


def marker_of(pid: int) -> str | None:
    """The ``RECONCILER_INSTANCE`` marker in a live process's environment, if any."""
    seen = _table().look(pid)
    return seen.marker if seen is not None else None


def looks_like_watch(pid: int | None) -> bool:
    """Is ``pid`` alive and does its command line run ``reconcile … watch``?

    ``reconcile start`` reads the lock holder's pid from the lock file and
    signals it (SIGHUP) only when this says yes; a pid recycled by some
    other program, or a ``--once`` run holding the lock, is left alone.
    """
    if not pid:
        return False
    table = _table()
    argv = table.cmdline(pid) if table.look(pid) is not None else None
    if not argv:
        return False
    runs_us = any(os.path.basename(word) in ("reconcile", "reconciler") for word in argv)
    return runs_us and "watch" in argv[1:]
