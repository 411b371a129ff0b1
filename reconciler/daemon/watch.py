"""The ``reconcile watch`` daemon loop (SHELL).

Level-triggered: whatever wakes the daemon, it runs one whole pass
(``loop.apply_pass``: re-read every manifest, re-observe every server). The
wake-ups only decide *when*:

* at start;
* a manifest change (``filewatch.FileWatch``: watchfiles in a helper thread,
  debounced; the event carries no meaning beyond "reconcile soon");
* the resync timer (``--resync``), counted from the end of the last pass;
* the planner's requeue hint (``Plan.requeue_after``: a short poll while a
  server loads, the exact end of a backoff delay), counted from the end of
  the pass that planned it, so the next pass is never early;
* the moment a managed server exits (the platform's exit watch: a pidfd per
  server on Linux; ``wakeups.py``);
* SIGHUP: now. SIGTERM/SIGINT: finish the pass in progress, then leave
  (managed servers keep running unless ``stop_on_exit``).

``reconcile start NAME`` cannot take the lock the daemon holds: it queues the
start in the store and sends SIGHUP. Every pass first takes the queued starts
(``Store.take_starts``), applies each (``Store.operator_start``: terminal
state cleared, restarts 0) and names them in the pass's ``operator_starts``.

All of these meet in one ``selectors`` wait (``wakeups.py``: signals through
their wake-up fd, the file watcher and ``request_*`` through a control pipe,
server exits through their pidfds), which answers a ``Wake`` saying why.
What each pass runs on and when the next is due is the pass policy
(``passes.py``). This module joins the two: wait, check its own world, run
a pass, watch the servers it left. ``signals_held`` blocks the three signals
from before the lock is taken until ``Daemon.run`` has its handlers in, so
an early SIGHUP (``reconcile start``) does not kill.

With a router (``NodeConfig.router``, §9) the daemon also runs the node's
OpenAI-compatible endpoint in a thread of its own (``router/service.py``):
a request that has to wait pokes the control pipe (a pass now, "demand"),
each pass starts from a snapshot of the router's demand, and its plan goes
back to the router as routes, which releases the waiters of a role that is
ready. The router starts with the first good desired state that has one,
and restarts when its configuration changes. After every pass the status
page's values go to its site (``statusslot.py``, §11), pushed to open pages.

A pass that raises is retried after ``passes.ERROR_RETRY``; an invalid
manifest edit keeps the last good desired state (``passes.py`` says how).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Iterator

from reconciler.daemon.passes import ERROR_RETRY, MIN_REQUEUE, PassPolicy, next_deadline
from reconciler.daemon.routerslot import RouterSlot
from reconciler.daemon.statusslot import StatusSlot
from reconciler.daemon.wakeups import SIGNALS, Cause, Wake, Wakeups, targets_from
from reconciler.engine import loop
from reconciler.engine.loop import PassInputs, PassResult
from reconciler.report import logs
from reconciler.system import signals

__all__ = ["Daemon", "ERROR_RETRY", "MIN_REQUEUE", "SIGNALS", "Wake", "next_deadline",
           "signals_held"]


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Block ``SIGNALS`` until a ``Daemon.run`` has its handlers in; the old mask after.

    ``reconcile start`` sends SIGHUP as soon as the lock file names our pid,
    and SIGHUP's default action kills. Held from before the lock is taken, a
    signal arriving early stays pending and reaches the daemon once its
    handlers are installed (``Daemon.run`` unblocks them): SIGHUP is one more
    pass, SIGTERM/SIGINT a clean stop after the first pass. One that came while
    the daemon was stopping asks for nothing more: it is discarded.
    """
    with signals.held(SIGNALS):
        yield


class Daemon:
    """The watch loop. The caller holds the lock and owns ``inputs.store``.

    ``inputs`` is the template of every pass (manifests, store, state
    directory, node, ``allow_empty``); ``metrics`` (``metrics.DaemonMetrics``)
    and ``router_factory`` ((RouterConfig, wake) -> ``router/service.Router``-like)
    publish each pass, or nothing when None, as does ``status_site``
    (``report/statussite.Site``, the status page, §11); ``lock_check`` is
    ``lock.Lock.check``.
    ``apply_pass``, ``watch_files`` and the two clocks are seams for tests.
    """

    def __init__(
        self,
        inputs: PassInputs,
        *,
        resync: float = 30.0,
        stop_on_exit: bool = False,
        metrics=None,
        router_factory=None,
        lock_check: Callable[[], tuple[str, str]] | None = None,
        status_site=None,
        apply_pass: Callable[[PassInputs], PassResult] | None = None,
        watch_files: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.stop_on_exit = stop_on_exit
        self.lost = ""  # why the daemon stopped acting: its state directory is gone
        self._watch_files = watch_files
        self._lock_check = lock_check
        self.wakeups = Wakeups(monotonic)
        self._router = RouterSlot(router_factory, self.request_demand, wall())
        self._status = StatusSlot(status_site)
        self.policy = PassPolicy(inputs, apply_pass=apply_pass or loop.apply_pass,
                                 resync=max(float(resync), 0.1), router=self._router,
                                 status=self._status, metrics=metrics, monotonic=monotonic,
                                 wall=wall)

    # What the passes left, for the callers and tests that look.
    store = property(lambda self: self.policy.store)
    metrics = property(lambda self: self.policy.metrics)
    last_good = property(lambda self: self.policy.last_good)
    last_result = property(lambda self: self.policy.last_result)
    passes = property(lambda self: self.policy.passes)

    # ------------------------------------------------------------ control (any thread)

    def request_stop(self) -> None:
        self.wakeups.request_stop()

    def request_pass(self) -> None:
        self.wakeups.request_pass()

    def request_demand(self) -> None:
        """The router has a request waiting: a pass now (§9)."""
        self.wakeups.request_demand()

    # ------------------------------------------------------------ life

    def run(self) -> int:
        """Reconcile until told to stop; 0 on a clean stop."""
        self.wakeups.install_signals()
        try:
            if self._watch_files:
                self.wakeups.watch_files(self.policy.template.paths)
            wake = Wake.of(Cause.START)
            while not wake.stop:
                if self._world_lost():
                    return 1
                self.reconcile(", ".join(wake.reasons))
                wake = self.wait()
            logs.emit("stopping: lock released, managed servers "
                      + ("stopped" if self.stop_on_exit else "left running"), event="stop")
            if self.stop_on_exit:
                self.policy.stop_all()
            return 0
        finally:
            self.close()

    def close(self) -> None:
        self._status.close()  # first: its open streams would hold the router's close
        self._router.close()
        self.wakeups.close()

    def wait(self) -> Wake:
        """Block until something asks for a pass (or a stop), at the latest when one is due."""
        return self.wakeups.wait(self.policy.deadline())

    def reconcile(self, why: str) -> None:
        """One pass, then the exits of the servers it left are watched."""
        self.policy.run(why)
        self._watch_exits()
        self.policy.ended()

    def stop_all(self) -> None:
        """``--stop-on-exit``: one last pass in which every managed role is stopped."""
        self.policy.stop_all()

    # ------------------------------------------------------------ its own world

    def _world_lost(self) -> bool:
        """Before each pass: is the state directory still the one locked? (README, faults)

        A removed lock file is re-created (the directory's flock kept a second
        writer out meanwhile). A removed state directory ends the daemon with
        exit 1, its servers left running: writing on into a deleted store would
        lose every record, and a new daemon re-adopts the servers by marker.
        """
        if self._lock_check is None:
            return False
        lost, restored = self._lock_check()
        if restored:
            logs.emit(restored, level=logging.WARNING, event="lock")
        if lost:
            self.lost = lost
            logs.emit(f"{lost}; stopping, managed servers left running; start the reconciler "
                      "again: it re-adopts them by their marker", level=logging.ERROR,
                      event="error")
            return True
        return False

    def _watch_exits(self) -> None:
        try:
            targets = targets_from(self.store.roles())
        except Exception:
            logs.emit("cannot read the store for exit watching", level=logging.ERROR,
                      exc_info=True, event="error")
            return
        gone = self.wakeups.watch_exits(targets)
        for role in gone:
            logs.emit(f"{role} is already gone; reconciling now", event="exit", role=role,
                      reason="exited")
        if gone:
            self.policy.requeue = 0.0
