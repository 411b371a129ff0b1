"""What the package asks of the operating system, as Protocols (PURE; BEHAVIOUR §3–§5, "Platforms").

Four seams, each answered by ``linux.py``, ``portable.py`` and ``macos.py``
(``choose.py`` picks one; ``tests/platform`` runs the same contract against each):

* ``ProcessTable``: the facts ``core/ownership.py`` judges (pid, create time,
  the ``RECONCILER_INSTANCE`` marker, process group, real uid, working
  directory, command line, alive), read from the OS. It reads; the rules are
  ownership's and ``world/procs.py`` asks them. A recorded process is looked
  at only with its recorded create time (``recorded``), so a recycled pid is
  never the recorded server;
* ``Listeners``: the machine's TCP LISTEN sockets by process group (§5: our
  servers lead their own group), and the machine's interface addresses (the
  §5 fallback when the socket table cannot be read);
* ``ExitWatch``: the daemon's notice of a server's exit, through descriptors
  registered in the daemon's one ``selectors`` wait; each registration's
  ``data`` is ``(TAG, …)`` and ``fired(data)`` says which servers ended. An
  exit is the end of the recorded process: a pid now held by a process with
  another create time has exited;
* ``KernelLog``: the kernel's own records since boot (``/dev/kmsg``'s format),
  for the post-mortem's out-of-memory line (§4); nothing, never an error,
  where it cannot be read.

Every method answers "unknown" (None, ``()``, ``[]``, False) rather than
raising when the OS refuses or the process is gone.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Iterable, Mapping, Protocol, runtime_checkable

import attrs

from reconciler.core.ownership import Seen

#: (pid, recorded create time) of one watched server.
Target = tuple[int, "float | None"]
#: The first item of the ``data`` of every selector registration an ``ExitWatch`` makes.
TAG = "exit"


class Access(enum.Enum):
    """A process that exists but may not be inspected (another user's, without root)."""

    DENIED = "denied"


DENIED = Access.DENIED


@runtime_checkable
class ProcessTable(Protocol):
    """The process facts ownership judges; None wherever a fact cannot be read."""

    def pids(self) -> list[int]:
        """Every pid on the machine now (some may be gone when read)."""

    def pgid(self, pid: int) -> int | None:
        """Its process group."""

    def cwd(self, pid: int) -> str | None:
        """Its working directory."""

    def create_time(self, pid: int) -> float | None:
        """When the process now at ``pid`` started (unix time); None: gone or not readable."""

    def recorded(self, pid: int | None, create_time: float | None, *, marker: bool = False,
                 proof: bool = False) -> Seen | Access | None:
        """The live process at ``pid`` if it has the recorded ``create_time``; else None.

        None also for a zombie or a recycled pid; ``DENIED`` when it exists but
        may not be inspected. ``marker``: its ``Seen.marker`` is read; ``proof``:
        its group, uid and cwd too (and the marker).
        """

    def look(self, pid: int, *, proof: bool = False) -> Seen | None:
        """The live process at ``pid`` (whatever its start), with its marker (``proof``: more)."""

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        """Its argv."""

    def environ(self, pid: int) -> dict[str, str] | None:
        """Its environment."""

    def exiting(self, pid: int, create_time: float) -> bool:
        """A zombie leader whose other threads still run (they hold its memory and sockets)."""

    def rss(self, pid: int) -> int | None:
        """Its resident memory in bytes."""

    def boot_time(self) -> float:
        """When the machine booted (unix time): kernel log times count from it."""


@runtime_checkable
class Listeners(Protocol):
    """The machine's listening TCP sockets, as ``host:port`` (``[host]:port`` for IPv6)."""

    def by_group(self, pgids: Iterable[int]) -> dict[int, tuple[str, ...]] | None:
        """The listeners held by the members of each process group, sorted; None: unreadable."""

    def interface_addresses(self) -> tuple[str, ...]:
        """Every IPv4 and IPv6 address of the machine's interfaces (loopback too), sorted."""


@runtime_checkable
class ExitWatch(Protocol):
    """Exit notices for watched servers, through the daemon's selector."""

    supported: bool  # False: it watches nothing (the resync timer notices exits)
    unsupported_reason: str

    @property
    def watched(self) -> dict[str, Target]:
        """role → the (pid, create time) watched."""

    def sync(self, targets: Mapping[str, Target]) -> tuple[str, ...]:
        """Watch exactly ``targets``; the roles whose process is already gone (each once)."""

    def fired(self, data: Any) -> tuple[tuple[str, Target], ...]:
        """A registration with ``data`` (``(TAG, …)``) is ready: the servers that ended.

        Each is no longer watched, and is not reported again while ``sync``
        still names the same (pid, create time).
        """

    def close(self) -> None:
        """Unregister and close everything."""


@runtime_checkable
class KernelLog(Protocol):
    """The kernel's own log records (``/dev/kmsg``: ``prio,seq,usec,flags;text``)."""

    def records(self) -> list[str]:
        """Every record it still holds, oldest first; [] when it cannot be read."""


@attrs.frozen(kw_only=True)
class Platform:
    """One implementation of every seam (``choose.current()``)."""

    name: str  # "linux", "portable" or "macos": RECONCILER_PLATFORM's words
    processes: ProcessTable
    listeners: Listeners
    kernel_log: KernelLog
    exit_watch: Callable[[Any], ExitWatch]  # given the daemon's ``selectors`` selector
