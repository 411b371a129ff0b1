"""The platform seam on macOS: psutil's process facts and listeners, exits through kqueue (SHELL).

The default on macOS (``choose.py``; ``RECONCILER_PLATFORM=macos``):

* the process table and the listeners are ``portable``'s (psutil: ``libproc``
  and ``sysctl`` underneath): start time, working directory, the
  ``RECONCILER_INSTANCE`` marker from the environment, group, uid, argv.
  Without root, another user's process answers ``DENIED`` and the socket
  table may be unreadable (None): the observer connects instead (§5);
* exit watching through one kqueue in the daemon's selector
  (``kqwatch.KqueueExitWatch``: ``EVFILT_PROC`` / ``NOTE_EXIT``, at once, also
  for servers an earlier run started);
* no kernel log (``NoKernelLog``). There is no ``/dev/kmsg``: what macOS tells
  of a server's end is the exit status and signal (``waitpid``, for our own
  children; §4's post-mortem), and the server's own log. A jetsam kill
  (macOS's out-of-memory killer) is recorded only in the unified log
  (``log show --predicate 'eventMessage CONTAINS "jetsam"'`` or the
  ``JetsamEvent-*.ips`` reports), which this module does not read: a
  post-mortem on macOS has no out-of-memory line.

The psutil parts run on Linux too and ``tests/platform`` runs its contract on
this table here; the kqueue part has never run on a Mac by this project
(``kqwatch.py``).
"""

from __future__ import annotations

from reconciler.platform import portable
from reconciler.platform.kqwatch import KqueueExitWatch
from reconciler.platform.seam import Platform


class Processes(portable.Processes):
    """``seam.ProcessTable``: psutil's facts as they are (no ``/proc`` on macOS)."""


class NoKernelLog(portable.NoKernelLog):
    """``seam.KernelLog`` on macOS: nothing (jetsam kills are in the unified log, not read)."""


def platform() -> Platform:
    processes = Processes()

    def running(pid: int, create_time: float | None) -> bool:
        return processes.recorded(pid, create_time) is not None

    return Platform(name="macos", processes=processes, listeners=portable.Listeners(),
                    kernel_log=NoKernelLog(),
                    exit_watch=lambda selector: KqueueExitWatch(selector, is_running=running))
