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
  log: the case users most need to see): the ``/dev/kmsg`` records since the
  process started, when this process may read them (root, or
  ``kernel.dmesg_restrict=0``). Only the kernel's own records count.

Nothing here raises: what cannot be read is simply not in the value.
"""

from __future__ import annotations

import errno
import os
import time

import attrs

from reconciler.planner import exitreasons
from reconciler.world import procs, serverlog
from reconciler.system import programs
from reconciler.core.observed import ExitInfo

KMSG = "/dev/kmsg"
_KMSG_MAX_BYTES = 8 * 1024 * 1024  # the kernel ring buffer is far smaller
_KMSG_MAX_SECONDS = 0.5


def gather(pid: int, create_time: float | None, cwd: str | None) -> ExitInfo:
    """How the recorded server ``pid`` (started at ``create_time``, working in ``cwd``) ended."""
    returncode = programs.exit_status(pid, create_time)
    info = exitreasons.from_returncode(returncode) if returncode is not None else ExitInfo()
    data = serverlog.tail(cwd) if cwd else None
    log = exitreasons.tail_lines(data) if data else ()
    oom = ""
    if info.signal == exitreasons.SIGKILL or not info.known:
        oom = kernel_oom(pid, create_time)
    return attrs.evolve(info, log=log, oom=oom)


def kernel_oom(pid: int, create_time: float | None, path: str = KMSG) -> str:
    """The kernel's OOM-kill line about ``pid`` since ``create_time``, or ""."""
    after_us = 0
    if create_time is not None:
        after_us = max(0, int((create_time - procs.boot_time()) * 1e6) - 1_000_000)
    return exitreasons.oom_line(_kmsg_records(path), pid, after_us=after_us)


def _kmsg_records(path: str) -> list[str]:
    """Every record /dev/kmsg still holds (one ``read`` is one record); [] when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
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
