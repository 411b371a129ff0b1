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
* the moment a managed server exits (a pidfd per server, ``pidwatch.py``);
* SIGHUP: now. SIGTERM/SIGINT: finish the pass in progress, then leave
  (managed servers keep running unless ``stop_on_exit``).

``reconcile start NAME`` cannot take the lock the daemon holds: it queues the
start in the store and sends SIGHUP. Every pass first takes the queued starts
(``Store.take_starts``), applies each (``Store.operator_start``: terminal
state cleared, restarts 0) and names them in the pass's ``operator_starts``.

All of these meet in one ``selectors`` wait: signals through their wake-up
fd (``signals.Wakeups``), the file watcher and ``request_*`` through a
control pipe, server exits through their pidfds. ``signals_held`` blocks the
three signals from before the lock is taken until ``Daemon.run`` has its
handlers in, so an early SIGHUP (``reconcile start``) does not kill.

With a router (``NodeConfig.router``, §9) the daemon also runs the node's
OpenAI-compatible endpoint in a thread of its own (``router/service.py``):
a request that has to wait pokes the control pipe (a pass now, "demand"),
each pass starts from a snapshot of the router's demand, and its plan goes
back to the router as routes, which releases the waiters of a role that is
ready. The router starts with the first good desired state that has one,
and restarts when its configuration changes. After every pass the status
page's values go to its site (``statusslot.py``, §11), pushed to open pages.

A pass that raises (a bug, a failing store) is logged with its traceback
and retried after ``ERROR_RETRY``; its metrics still go out, with
``reconciler_last_pass_success 0``, its own time and duration and the role
series of the last result known.

An invalid manifest edit keeps the last good desired state: its problems
are logged with file:line, one ``manifests invalid`` event is recorded per
distinct set of problems, and the pass runs on the last good state; a fixed
file is simply the next good state.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import selectors
import time
from typing import Callable, Iterator, Sequence

import attrs

from reconciler.core import events
from reconciler.report import logs
from reconciler.daemon import pidwatch
from reconciler.system import signals
from reconciler.core.errors import StateError
from reconciler.daemon.filewatch import FileWatch
from reconciler.core.desired import Desired, WantedState
from reconciler.engine.loop import PassInputs, PassResult
from reconciler.daemon.routerslot import RouterSlot
from reconciler.daemon.statusslot import StatusSlot

#: The requeue hint is honoured from this gap on, so a planner that keeps
#: asking for 0 s cannot spin the daemon.
MIN_REQUEUE = 0.02
#: After a pass that crashed with a bug, try again after at most this long.
ERROR_RETRY = 5.0

#: The signals the daemon acts on (between passes, through the wake-up fd).
SIGNALS = signals.DAEMON

_CONTROL, _SIGNALS = "control", "signals"
_FILES, _STOP, _NOW, _DEMAND = b"f", b"s", b"p", b"d"


@attrs.frozen(kw_only=True)
class Wake:
    """Why the daemon woke up (for the log), or that it must stop."""

    reasons: tuple[str, ...] = ()
    stop: bool = False


def next_deadline(
    last_end: float, resync: float, requeue_after: float | None
) -> tuple[float, str]:
    """When the timer wakes the daemon next, and why (PURE helper)."""
    deadline, why = last_end + resync, "resync"
    if requeue_after is not None:
        at = last_end + max(requeue_after, MIN_REQUEUE)
        if at < deadline:
            deadline, why = at, "requeue"
    return deadline, why


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


# ---------------------------------------------------------------- the daemon


class Daemon:
    """The watch loop. The caller holds the lock and owns ``store``."""

    def __init__(
        self,
        *,
        paths: Sequence[str],
        store,
        state_dir: str,
        resync: float = 30.0,
        allow_empty: bool = False,
        stop_on_exit: bool = False,
        metrics=None,
        apply_pass: Callable[[PassInputs], PassResult] | None = None,
        watch_files: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        node=None,  # fleet.NodeChoice: which node this is (§10); None: a set's only node
        router_factory=None,  # (RouterConfig, wake) -> router/service.Router-like; None: no router
        lock_check: Callable[[], tuple[str, str]] | None = None,  # lock.Lock.check
        status_site=None,  # report/statussite.Site: the status page (§11); None: none
    ) -> None:
        if apply_pass is None:
            from reconciler.engine import loop

            apply_pass = loop.apply_pass
        self.paths = list(paths)
        self.node = node
        self.store = store
        self.state_dir = state_dir
        self.resync = max(float(resync), 0.1)
        self.allow_empty = allow_empty
        self.stop_on_exit = stop_on_exit
        self.metrics = metrics  # metrics.DaemonMetrics, or None: nothing is published
        self._apply_pass = apply_pass
        self._watch_files = watch_files
        self._monotonic = monotonic
        self._wall = wall
        self._lock_check = lock_check
        self._model_verifier = None  # modelstore.Verifier, made at the first pass
        self.lost = ""  # why the daemon stopped acting: its state directory is gone

        self.last_good: Desired | None = None
        self.last_result = None
        self._shown = None  # the last pass result the metrics were rendered from
        self.passes = 0
        self._problems: tuple[str, ...] = ()
        self._warnings: tuple[str, ...] = ()
        self._logged: dict = {}
        self._last_end = monotonic()
        self._requeue: float | None = None

        self._selector = selectors.DefaultSelector()
        self._ctl_r, self._ctl_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._sig_r, self._sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._ctl_r, selectors.EVENT_READ, _CONTROL)
        self._selector.register(self._sig_r, selectors.EVENT_READ, _SIGNALS)
        self.exits = pidwatch.ExitWatch(self._selector)
        self._files: FileWatch | None = None
        self._wakeups = signals.Wakeups(self._sig_w, SIGNALS)
        self._router = RouterSlot(router_factory, self.request_demand, wall())
        self._status = StatusSlot(status_site)

    # ------------------------------------------------------------ control (any thread)

    def request_stop(self) -> None:
        self._poke(_STOP)

    def request_pass(self) -> None:
        self._poke(_NOW)

    def request_demand(self) -> None:
        """The router has a request waiting: a pass now (§9)."""
        self._poke(_DEMAND)

    def _poke(self, byte: bytes) -> None:
        try:
            os.write(self._ctl_w, byte)
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    # ------------------------------------------------------------ life

    def run(self) -> int:
        """Reconcile until told to stop; 0 on a clean stop."""
        self._wakeups.install()
        try:
            if self._watch_files:
                self._files = FileWatch(self.paths, lambda: self._poke(_FILES))
                for path in self._files.missing:
                    logs.emit(f"{path} does not exist; not watching it (resync only)",
                              level=logging.WARNING)
                self._files.start()
            wake = Wake(reasons=("start",))
            while not wake.stop:
                if self._world_lost():
                    return 1
                self.reconcile(", ".join(wake.reasons))
                wake = self.wait()
            logs.emit("stopping: lock released, managed servers "
                      + ("stopped" if self.stop_on_exit else "left running"), event="stop")
            if self.stop_on_exit:
                self.stop_all()
            return 0
        finally:
            self.close()

    def close(self) -> None:
        self._status.close()  # first: its open streams would hold the router's close
        self._router.close()
        if self._files is not None:
            self._files.close()
            self._files = None
        self._wakeups.restore()
        self.exits.close()
        for fd in (self._ctl_r, self._ctl_w, self._sig_r, self._sig_w):
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass
            try:
                os.close(fd)
            except OSError:
                pass
        self._selector.close()

    # ------------------------------------------------------------ waiting

    def wait(self) -> Wake:
        """Block until something asks for a pass (or a stop)."""
        deadline, why = next_deadline(self._last_end, self.resync, self._requeue)
        while True:
            timeout = deadline - self._monotonic()
            if timeout <= 0:
                return Wake(reasons=(why,))
            reasons: list[str] = []
            stop = False
            for key, _ in self._selector.select(timeout):
                if key.data == _SIGNALS:
                    for signum in _drain(self._sig_r):
                        if signum in (signals.SIGTERM, signals.SIGINT):
                            logs.emit(f"received {signals.name(signum)}", event="signal")
                            stop = True
                        elif signum == signals.SIGHUP:
                            reasons.append("SIGHUP")
                elif key.data == _CONTROL:
                    data = bytes(_drain(self._ctl_r))
                    stop = stop or _STOP in data
                    if _FILES in data:
                        reasons.append("manifests changed")
                    if _NOW in data:
                        reasons.append("requested")
                    if _DEMAND in data:
                        reasons.append("demand")
                elif isinstance(key.data, tuple) and key.data[0] == pidwatch.TAG:
                    role = key.data[1]
                    ended = self.exits.exited(role)
                    pid = ended[0] if ended else None
                    logs.emit(f"{role} exited (pid {pid}); reconciling now", event="exit",
                              role=role, pid=pid, reason="exited")
                    reasons.append(f"{role} exited")
            if stop:
                return Wake(stop=True)
            if reasons:
                return Wake(reasons=tuple(dict.fromkeys(reasons)))

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

    # ------------------------------------------------------------ a pass

    def reconcile(self, why: str) -> None:
        """One pass (two when the manifests are invalid and a last good state exists)."""
        from reconciler.system import programs

        programs.reap()  # our own exited children: no zombie outlives a pass
        started, t0 = self._wall(), self._monotonic()
        logs.emit(f"pass ({why})", level=logging.DEBUG, event="pass", reason=why)
        self.passes += 1
        problems: tuple = ()
        result = None
        failed = False
        try:
            starts = self._take_starts()
            demand, seq = self._router.demand()
            result = self._call_pass(operator_starts=starts, demand=demand,
                                     gate=self._router.gate)
            problems = tuple(result.problems)
            if problems:
                self._invalid(problems, result.git_commit)
                if self.last_good is not None:
                    result = self._call_pass(desired=self.last_good, operator_starts=starts,
                                             demand=demand, gate=self._router.gate)
            else:
                if self._problems:
                    logs.emit("manifests valid again; resuming from them", event="valid",
                              role="manifests", verb="valid", reason="fixed")
                    self.store.add_event(events.manifests_valid(
                        git_commit=result.git_commit, at=self._wall()))
                self._problems = ()
                self.last_good = result.desired
                self._log_warnings(result.warnings)
            self._logged = logs.log_pass(result, self._logged)
            self._requeue = result.plan.requeue_after if result.plan is not None else None
            self._router.publish(self.last_good.node.router if self.last_good is not None
                                 else None, result, seq)
            self._status.publish(self.last_good.node if self.last_good is not None else None,
                                 result, problems, self.store, self.state_dir)
        except StateError as exc:
            # The store's own world broke (a full disk …): one line, no traceback;
            # the next pass tries again (a server spawned before the failure was
            # recorded is re-adopted by its marker then).
            logs.emit(f"the pass failed: {exc}; retrying in {ERROR_RETRY:g}s", level=logging.ERROR,
                      event="error")
            self._requeue = ERROR_RETRY
            failed = True
            if result is None:
                problems = self._problems
        except Exception:
            logs.emit("the pass failed", level=logging.ERROR, exc_info=True, event="error")
            self._requeue = ERROR_RETRY
            failed = True
            if result is None:
                problems = self._problems  # nothing new is known about the manifests
        self.last_result = result
        duration = self._monotonic() - t0
        self._publish(result, problems, started, duration, failed=failed)
        self._watch_exits()
        self._last_end = self._monotonic()

    def _take_starts(self) -> frozenset[str]:
        """The operator starts ``reconcile start`` queued for us, applied to the store (§4)."""
        names = self.store.take_starts()
        for name in sorted(names):
            detail = self.store.operator_start(name)
            kind = events.EventKind.OPERATOR_START
            logs.emit(f"operator start of {name}: {detail}", event=kind, role=name, verb=kind,
                      reason="operator", detail=detail)
        return names

    def _call_pass(self, **extra) -> PassResult:
        return self._apply_pass(PassInputs(paths=self.paths, store=self.store,
                                           state_dir=self.state_dir, node=self.node,
                                           allow_empty=self.allow_empty,
                                           verifier=self._verifier(), **extra))

    def _verifier(self):
        """One model verifier for the daemon's life (§1.1): the first use by this process
        hashes every byte; later passes re-hash only files whose stamp changed."""
        if self._model_verifier is None:
            from reconciler.models import modelstore

            self._model_verifier = modelstore.Verifier(self.store)
        return self._model_verifier

    def _invalid(self, problems: tuple, commit: str | None) -> None:
        texts = tuple(str(p) for p in problems)
        if texts == self._problems:
            return  # already logged and recorded; the last good state still holds
        self._problems = texts
        logs.log_problems(problems, kept_last_good=self.last_good is not None)
        then = ("keeping the last good desired state" if self.last_good is not None
                else "no good desired state yet; nothing changed")
        detail = f"{len(texts)} problem(s), {then}: " + "; ".join(texts[:5])
        if len(texts) > 5:
            detail += f"; … {len(texts) - 5} more"
        self.store.add_event(events.manifests_invalid(detail, git_commit=commit,
                                                      at=self._wall()))

    def _log_warnings(self, warnings) -> None:
        texts = tuple(str(w) for w in warnings)
        if texts != self._warnings:
            logs.log_warnings(warnings)
            self._warnings = texts

    def _publish(self, result, problems: tuple, started: float, duration: float,
                 *, failed: bool = False) -> None:
        """The pass's metrics to /metrics and --metrics-file.

        A pass that raised still publishes: success 0 with this pass's time
        and duration, and the role series of the last result known (so a
        scrape sees the failure, not the last success).
        """
        if failed and getattr(result, "plan", None) is None:
            result = self._shown  # nothing newer is known about the roles
        else:
            self._shown = result
        if self.metrics is None:
            return
        update = functools.partial(self.metrics.passes.update, result,
                                   problems_count=len(problems), last_pass_ts=started,
                                   duration=duration, failed=failed)
        try:
            update(self.store)
        except Exception:
            # Most likely the very store that failed the pass: say so without it.
            logs.emit("cannot read the store for the metrics", level=logging.ERROR,
                      exc_info=True, event="error")
            update(None, failed=True)
        try:
            self.metrics.write()
        except OSError as exc:
            logs.emit(f"cannot write metrics: {exc}", level=logging.WARNING, event="error")

    def _watch_exits(self) -> None:
        try:
            targets = pidwatch.targets_from(self.store.roles())
        except Exception:
            logs.emit("cannot read the store for exit watching", level=logging.ERROR,
                      exc_info=True, event="error")
            return
        was_supported = self.exits.supported
        gone = self.exits.sync(targets)
        if was_supported and not self.exits.supported:
            logs.emit(f"no exit notification ({self.exits.unsupported_reason}); "
                      "exits are noticed by the resync timer", level=logging.WARNING)
        for role in gone:
            logs.emit(f"{role} is already gone; reconciling now", event="exit", role=role,
                      reason="exited")
        if gone:
            self._requeue = 0.0

    # ------------------------------------------------------------ leaving

    def stop_all(self) -> None:
        """``--stop-on-exit``: one last pass in which every managed role is stopped."""
        desired = self.last_good or Desired()
        stopped = attrs.evolve(desired, roles=tuple(
            attrs.evolve(role, state=WantedState.STOPPED) if role.managed else role
            for role in desired.roles
        ))
        try:
            # allow_empty: with no good state at all, the store's servers are stopped too.
            result = self._apply_pass(PassInputs(paths=self.paths, store=self.store,
                                                 state_dir=self.state_dir, allow_empty=True,
                                                 desired=stopped))
            self._logged = logs.log_pass(result, None)
        except Exception:
            logs.emit("stopping the managed servers failed", level=logging.ERROR,
                      exc_info=True, event="error")


def _drain(fd: int) -> bytearray:
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk
