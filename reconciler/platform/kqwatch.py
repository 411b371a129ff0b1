"""Exit watching through one kqueue (SHELL; ``macos``'s ``ExitWatch``).

NEVER RUN ON macOS BY THIS PROJECT: there is no Mac here. Its bookkeeping runs
here against a stand-in kqueue (``tests/platform/test_kqwatch.py``); the real
kernel calls only where ``select.kqueue`` exists (the same file's macOS tests).

macOS has no pidfds, but its kqueue watches any process by pid, also one this
process did not start: a ``kevent`` on the pid with filter ``EVFILT_PROC`` and
``NOTE_EXIT`` is delivered when that process exits (before it is reaped), and
adding one for a pid that no longer exists fails with ``ESRCH``
(``ProcessLookupError``): already gone. One kqueue holds every watched server;
its descriptor is registered in the daemon's selector (``data``: ``(TAG,
None)``) and becomes readable when an exit is queued, so the daemon's one
``select`` waits on exits, signals, manifest edits and its timers together, as
the pidfds do on Linux (``linux.PidfdExitWatch``, whose interface this mirrors).

A kevent on a recycled pid would watch the wrong process, so after adding it
the recorded create time is checked; a process that is already gone, a zombie
or another process at the pid is reported at once, and only once per (pid,
create time). Each kevent is ``EV_ONESHOT``: it is dropped when it fires.
Where ``select.kqueue`` is missing (Linux) it says so and watches nothing.
"""

from __future__ import annotations

import select
import selectors
from typing import Any, Callable, Mapping

from reconciler.platform.seam import TAG, Target

#: Events taken from the kqueue per ``control`` call when it is drained.
_BATCH = 64


class KqueueExitWatch:
    """``seam.ExitWatch`` on one kqueue (``EVFILT_PROC`` / ``NOTE_EXIT``) in the daemon's selector.

    ``is_running(pid, create time)``: is the recorded process alive (the
    platform's process table). ``kq``: the module that provides ``kqueue`` and
    ``kevent`` and its constants (``select``; tests give a stand-in).
    """

    def __init__(self, selector: selectors.BaseSelector, *,
                 is_running: Callable[[int, float | None], bool], kq: Any = select) -> None:
        self._selector = selector
        self._is_running = is_running
        self._kq_module = kq
        self._targets: dict[str, Target] = {}  # role → watched (a kevent added)
        self._reported: set[Target] = set()  # already said to be gone
        self._kq: Any = None
        self.supported = hasattr(kq, "kqueue")
        self.unsupported_reason = "" if self.supported else \
            "select.kqueue is not available (kqueue is macOS's and the BSDs')"
        if self.supported:
            try:
                self._kq = kq.kqueue()
            except OSError as exc:  # out of descriptors
                self.supported = False
                self.unsupported_reason = f"kqueue() failed: {exc.strerror or exc}"
                return
            selector.register(self._kq.fileno(), selectors.EVENT_READ, (TAG, None))

    @property
    def watched(self) -> dict[str, Target]:
        return dict(self._targets)

    def _kevent(self, pid: int, flags: int) -> Any:
        m = self._kq_module
        return m.kevent(pid, filter=m.KQ_FILTER_PROC, flags=flags, fflags=m.KQ_NOTE_EXIT)

    def _add(self, pid: int) -> None:
        m = self._kq_module
        self._kq.control([self._kevent(pid, m.KQ_EV_ADD | m.KQ_EV_ONESHOT)], 0, 0)

    def _delete(self, pid: int) -> None:
        try:
            self._kq.control([self._kevent(pid, self._kq_module.KQ_EV_DELETE)], 0, 0)
        except OSError:
            pass  # ENOENT: it fired (oneshot) or the process is gone

    def sync(self, targets: Mapping[str, Target]) -> tuple[str, ...]:
        """Watch exactly ``targets``; the roles whose process is already gone (each once)."""
        for role in list(self._targets):
            if self._targets[role] != targets.get(role):
                self._forget(role)
        self._reported &= set(targets.values())
        if not self.supported or self._kq is None:
            return ()
        gone = []
        for role, target in sorted(targets.items()):
            if role in self._targets or target in self._reported:
                continue
            pid, ctime = target
            try:
                self._add(pid)
            except ProcessLookupError:  # ESRCH: no such process (any more)
                self._reported.add(target)
                gone.append(role)
                continue
            except OSError as exc:  # a sandbox, a kernel limit
                self.supported = False
                self.unsupported_reason = f"kevent(EVFILT_PROC) failed: {exc.strerror or exc}"
                self.close()
                return tuple(gone)
            if not self._is_running(pid, ctime):
                # Recycled pid, a zombie, or gone between the pass and now.
                self._delete(pid)
                self._reported.add(target)
                gone.append(role)
                continue
            self._targets[role] = target
        return tuple(gone)

    def fired(self, data: Any) -> tuple[tuple[str, Target], ...]:
        """The kqueue is readable: every queued exit of a watched pid ends its role."""
        if self._kq is None:
            return ()
        pids: set[int] = set()
        while True:
            try:
                events = self._kq.control(None, _BATCH, 0)
            except OSError:
                break
            pids.update(int(event.ident) for event in events
                        if event.fflags & self._kq_module.KQ_NOTE_EXIT)
            if len(events) < _BATCH:
                break
        ended = []
        for role, target in sorted(self._targets.items()):
            if target[0] in pids:
                ended.append((role, target))
        for role, target in ended:
            del self._targets[role]  # its oneshot kevent is gone with the event
            self._reported.add(target)
        return tuple(ended)

    def _forget(self, role: str) -> None:
        pid, _ = self._targets.pop(role)
        if self._kq is not None:
            self._delete(pid)

    def close(self) -> None:
        for role in list(self._targets):
            self._forget(role)
        if self._kq is not None:
            try:
                self._selector.unregister(self._kq.fileno())
            except (KeyError, ValueError):
                pass
            self._kq.close()
            self._kq = None
