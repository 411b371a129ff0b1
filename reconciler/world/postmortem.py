"""What is left of a server of ours that ended (SHELL; BEHAVIOUR §4: every exit says why).

When the observer finds a recorded server gone, ``gather`` collects, as an
``ExitInfo`` value (``exitreasons.py`` puts it in words):

* its **exit status**: Linux gives it to the parent alone. A server this
  process started (``reconcile watch``'s servers, a ``--once`` run's own) is
  reaped by ``programs`` and its code or signal is known. A server an earlier
  run started was re-parented to init when that run ended, so its status is
  unknowable now, and ``ExitInfo.known`` says so, honestly;
* the **last lines of its log**, ``<data_root>/<instance id>/server.log``
  (read with ``serverlog``'s rules: no symlink, no hard link, no FIFO);
* the **kernel's word on an out-of-memory kill** (SIGKILL, nothing in the
  log: the case users most need to see): the platform's kernel log
  (``seam.KernelLog``; Linux: the ``/dev/kmsg`` records, when this process may
  read them: root, or ``kernel.dmesg_restrict=0``; ``portable``: none), since
  the process started. Only the kernel's own records count.

Nothing here raises: what cannot be read is simply not in the value.
"""

from __future__ import annotations

import attrs

from reconciler.planner import exitreasons
from reconciler.platform import choose
from reconciler.platform.seam import KernelLog
from reconciler.world import procs, serverlog
from reconciler.system import programs
from reconciler.core.observed import ExitInfo


def gather(pid: int, create_time: float | None, cwd: str | None, *,
           records: bool = True) -> ExitInfo:
    """How the recorded server ``pid`` (started at ``create_time``, working in ``cwd``) ended.

    ``records``: this pass writes what it finds. One that does not (``status``, ``plan``)
    is never the server's parent, while the reconciler that is (a running ``watch``) may
    not have recorded the exit yet: its unknown status is "not recorded yet", not "unknown".
    """
    returncode = programs.exit_status(pid, create_time)
    info = (exitreasons.from_returncode(returncode) if returncode is not None
            else ExitInfo(pending=not records))
    data = serverlog.tail(cwd) if cwd else None
    log = exitreasons.tail_lines(data) if data else ()
    oom = ""
    if info.signal == exitreasons.SIGKILL or not info.known:
        oom = kernel_oom(pid, create_time)
    return attrs.evolve(info, log=log, oom=oom)


def kernel_oom(pid: int, create_time: float | None, log: KernelLog | None = None) -> str:
    """The kernel's OOM-kill line about ``pid`` since ``create_time``, or ""."""
    after_us = 0
    if create_time is not None:
        after_us = max(0, int((create_time - procs.boot_time()) * 1e6) - 1_000_000)
    records = (log or choose.current().kernel_log).records()
    return exitreasons.oom_line(records, pid, after_us=after_us)
