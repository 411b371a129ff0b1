"""A recorded server's ownership facts read straight from ``/proc`` (SHELL; Linux).

The observer asks ``ownership.owned`` of every recorded server every pass. psutil's
way (a Process, ``is_running``, ``status``, ``environ``) reads the stat file three
times and the boot time once per process; this reads the stat line, the
environment, and the stat line again — about a quarter of the CPU — and gives
the same answers (``tests/safety/test_ownership_reads.py`` holds it to psutil's).
The boot time still comes from psutil (``portable``), read at most once a second.
"""

from __future__ import annotations

import os
import time

from reconciler.core import ownership
from reconciler.core.ownership import MARKER_ENV, Seen
from reconciler.platform import portable

_TICKS = os.sysconf("SC_CLK_TCK")  # a start in /proc/<pid>/stat counts these
_BOOT: list[float] = [0.0, -1.0]  # boot time, and when (monotonic) it was read
_PSUTIL = portable.Processes()


def _boot_time() -> float:
    """psutil's boot time read at most once a second (the passes' many processes share it;
    it moves only with a step of the wall clock, as psutil's own create times do)."""
    now = time.monotonic()
    if _BOOT[1] < 0 or now - _BOOT[1] > 1.0:
        _BOOT[:] = [_PSUTIL.boot_time(), now]
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


def owned_seen(pid: int, recorded_create_time: float) -> Seen | None:
    """What ``ownership.owned`` reads of the live process at a recorded pid; None: gone, a
    zombie, unreadable, or a recycled pid (whose environment is never read).

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
    return Seen(pid=pid, create_time=created, marker=marker)
