"""Exit watching by polling, on any process table (SHELL; ``portable``'s ``ExitWatch``).

Where the kernel gives no exit notice for a process that is not our child
(no pidfds), a thread looks at the watched servers every ``POLL_PERIOD`` and
writes a byte to a pipe registered in the daemon's selector (``data``:
``(TAG, None)``); ``fired`` then says which ended. A watched server has ended
when the table no longer shows the recorded process alive: its pid is gone,
it is a zombie, or its pid is held by a process with another create time (a
reused pid: the recorded server ended, whatever runs there now). A process
that may not be inspected is not known to be gone and stays watched.

The cost is one look per watched server per period (psutil: ~50 µs, a few
small reads of ``/proc/<pid>/stat`` on Linux): measured here, 20 watched
servers cost 2 % of one core, 200 cost ~12 % (on a loaded 2-core machine).
With nothing watched the thread sleeps until ``sync``.
"""

from __future__ import annotations

import os
import selectors
import threading
from typing import Any, Mapping

from reconciler.platform.seam import TAG, ProcessTable, Target

#: How often the watched servers are looked at (seconds): an exit is seen within about this.
POLL_PERIOD = 0.1


class PollingExitWatch:
    """``seam.ExitWatch`` by polling ``table`` from a thread, every ``period`` seconds."""

    def __init__(self, selector: selectors.BaseSelector, table: ProcessTable, *,
                 period: float = POLL_PERIOD) -> None:
        self._selector, self._table, self._period = selector, table, period
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._targets: dict[str, Target] = {}  # role → watched
        self._ended: dict[str, Target] = {}  # seen to end, not yet fired
        self._reported: set[Target] = set()  # already said to be gone
        self._closing = False
        self._thread: threading.Thread | None = None
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        selector.register(self._r, selectors.EVENT_READ, (TAG, None))
        self.supported = True
        self.unsupported_reason = ""

    def ended(self, target: Target) -> bool:
        """Has the watched process ended (gone, a zombie, or its pid reused)?"""
        return self._table.recorded(*target) is None

    @property
    def watched(self) -> dict[str, Target]:
        with self._lock:
            return dict(self._targets)

    def sync(self, targets: Mapping[str, Target]) -> tuple[str, ...]:
        with self._lock:
            self._targets = {r: t for r, t in self._targets.items() if targets.get(r) == t}
            self._ended = {r: t for r, t in self._ended.items() if targets.get(r) == t}
            self._reported &= set(targets.values())
            new = {r: t for r, t in targets.items()
                   if r not in self._targets and r not in self._ended and t not in self._reported}
        gone = []
        for role, target in sorted(new.items()):
            is_gone = self.ended(target)
            with self._lock:
                if is_gone:
                    self._reported.add(target)
                    gone.append(role)
                else:
                    self._targets[role] = target
        if self._thread is None and len(gone) < len(new):
            self._thread = threading.Thread(target=self._run, name="reconciler-exitwatch",
                                            daemon=True)
            self._thread.start()
        self._wake.set()
        return tuple(gone)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                targets = dict(self._targets)
            if not targets:
                self._wake.wait()
                self._wake.clear()
                continue
            ended_now = {r: t for r, t in targets.items() if self.ended(t)}
            if ended_now:
                with self._lock:
                    for role, target in ended_now.items():
                        if self._targets.get(role) == target:
                            del self._targets[role]
                            self._ended[role] = target
                try:
                    os.write(self._w, b"x")
                except OSError:
                    pass  # full (a wake-up is pending anyway) or closed
            self._wake.wait(self._period)
            self._wake.clear()

    def fired(self, data: Any) -> tuple[tuple[str, Target], ...]:
        try:
            while os.read(self._r, 512):
                pass
        except OSError:
            pass  # drained (BlockingIOError), or closed
        with self._lock:
            out, self._ended = self._ended, {}
            self._reported.update(out.values())
        return tuple(sorted(out.items()))

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._targets, self._ended = {}, {}
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        try:
            self._selector.unregister(self._r)
        except (KeyError, ValueError):
            pass
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
