"""The ``watch`` daemon's pass policy: what each pass runs on, and when the next is due (SHELL).

Every pass starts from one ``PassInputs`` template (the caller's: manifests,
store, state directory, node, ``--allow-empty``) changed with
``attrs.evolve`` for what this pass adds:

* the operator starts ``reconcile start`` queued for us (``Store.take_starts``,
  each applied by ``Store.operator_start`` and named in the pass);
* the router's demand snapshot (§9), and the pass's result handed back to
  it and to the status page (§11);
* the model verifier, one for the daemon's life (§1.1);
* the last good desired state, when the manifests are invalid: their
  problems are logged with file:line, one ``manifests invalid`` event is
  recorded per distinct set of problems, and the pass runs on the last good
  state; a fixed file is simply the next good state.

When the next pass is due without a wake-up (``deadline``): the resync timer,
or the planner's requeue hint (``Plan.requeue_after``), whichever is sooner,
counted from the end of the last pass so the next is never early. A pass
that raises (a bug, a failing store) is logged and retried after
``ERROR_RETRY``; its metrics still go out, with
``reconciler_last_pass_success 0``, its own time and duration and the role
series of the last result known.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import attrs

from reconciler.core import events
from reconciler.core.desired import Desired, WantedState
from reconciler.core.errors import StateError
from reconciler.daemon.routerslot import RouterSlot
from reconciler.daemon.statusslot import StatusSlot
from reconciler.daemon.wakeups import Cause, Deadline
from reconciler.engine.loop import PassInputs, PassResult
from reconciler.models import modelstore
from reconciler.report import logs
from reconciler.system import programs

#: The requeue hint is honoured from this gap on, so a planner that keeps
#: asking for 0 s cannot spin the daemon.
MIN_REQUEUE = 0.02
#: After a pass that crashed with a bug, try again after at most this long.
ERROR_RETRY = 5.0


def next_deadline(last_end: float, resync: float, requeue_after: float | None) -> Deadline:
    """When the timer wakes the daemon next, and why (PURE helper)."""
    deadline = Deadline(at=last_end + resync, why=Cause.RESYNC)
    if requeue_after is not None:
        at = last_end + max(requeue_after, MIN_REQUEUE)
        if at < deadline.at:
            deadline = Deadline(at=at, why=Cause.REQUEUE)
    return deadline


@attrs.define
class _SoFar:
    """What a pass had when it raised: its result so far, and the manifests' problems."""

    result: PassResult | None = None
    problems: tuple = ()


class PassPolicy:
    """Runs the daemon's passes from ``template`` and keeps what carries over between them."""

    def __init__(self, template: PassInputs, *, apply_pass: Callable[[PassInputs], PassResult],
                 resync: float, router: RouterSlot, status: StatusSlot | None = None,
                 metrics=None,
                 monotonic: Callable[[], float], wall: Callable[[], float]) -> None:
        self.template = template
        self.resync = resync
        self.metrics = metrics  # metrics.DaemonMetrics, or None: nothing is published
        self._apply_pass = apply_pass
        self._router = router
        self._status = status if status is not None else StatusSlot(None)
        self._monotonic = monotonic
        self._wall = wall
        self._model_verifier = None  # modelstore.Verifier, made at the first pass

        self.last_good: Desired | None = None
        self.last_result: PassResult | None = None
        self._shown = None  # the last pass result the metrics were rendered from
        self.passes = 0
        self._problems: tuple[str, ...] = ()
        self._warnings: tuple[str, ...] = ()
        self._logged: dict = {}
        self.last_end = monotonic()
        self.requeue: float | None = None

    @property
    def store(self):
        return self.template.store

    def deadline(self) -> Deadline:
        """The next pass without a wake-up: resync, or the requeue hint when sooner."""
        return next_deadline(self.last_end, self.resync, self.requeue)

    # ------------------------------------------------------------ a pass

    def run(self, why: str) -> None:
        """One pass (two when the manifests are invalid and a last good state exists).

        The caller says when all that follows the pass is done (``ended``).
        """
        programs.reap()  # our own exited children: no zombie outlives a pass
        started, t0 = self._wall(), self._monotonic()
        logs.emit(f"pass ({why})", level=logging.DEBUG, event="pass", reason=why)
        self.passes += 1
        so_far = _SoFar()
        failed = False
        try:
            self._attempt(so_far)
        except StateError as exc:
            # The store's own world broke (a full disk …): one line, no traceback;
            # the next pass tries again (a server spawned before the failure was
            # recorded is re-adopted by its marker then).
            logs.emit(f"the pass failed: {exc}; retrying in {ERROR_RETRY:g}s", level=logging.ERROR,
                      event="error")
            failed = True
        except Exception:
            logs.emit("the pass failed", level=logging.ERROR, exc_info=True, event="error")
            failed = True
        if failed:
            self.requeue = ERROR_RETRY
        # With no result at all, nothing new is known about the manifests.
        problems = so_far.problems if so_far.result is not None else self._problems
        self.last_result = so_far.result
        self._publish(so_far.result, problems, started, self._monotonic() - t0, failed=failed)

    def ended(self) -> None:
        """The pass and what follows it are over: the timer counts from now."""
        self.last_end = self._monotonic()

    def _attempt(self, so_far: _SoFar) -> None:
        """The pass, on the last good state when the manifests are invalid; ``so_far`` filled."""
        starts = self._take_starts()
        demand, seq = self._router.demand()
        this = attrs.evolve(self.template, operator_starts=starts, demand=demand,
                            verifier=self._verifier(), gate=self._router.gate)
        result = so_far.result = self._apply_pass(this)
        so_far.problems = tuple(result.problems)
        if result.problems:
            self._invalid(result.problems, result.git_commit)
            if self.last_good is not None:
                this = attrs.evolve(this, desired=self.last_good)
                result = so_far.result = self._apply_pass(this)
        else:
            self._valid(result)
        self._logged = logs.log_pass(result, self._logged)
        self.requeue = result.plan.requeue_after if result.plan is not None else None
        self._router.publish(self.last_good.node.router if self.last_good is not None
                             else None, result, seq)
        self._status.publish(self.last_good.node if self.last_good is not None else None,
                             result, so_far.problems, self.store, self.template.state_dir)

    def _take_starts(self) -> frozenset[str]:
        """The operator starts ``reconcile start`` queued for us, applied to the store (§4)."""
        names = self.store.take_starts()
        for name in sorted(names):
            detail = self.store.operator_start(name)
            kind = events.EventKind.OPERATOR_START
            logs.emit(f"operator start of {name}: {detail}", event=kind, role=name, verb=kind,
                      reason="operator", detail=detail)
        return names

    def _verifier(self):
        """One model verifier for the daemon's life (§1.1): the first use by this process
        hashes every byte; later passes re-hash only files whose stamp changed."""
        if self._model_verifier is None:
            self._model_verifier = modelstore.Verifier(self.store)
        return self._model_verifier

    def _valid(self, result: PassResult) -> None:
        if self._problems:
            logs.emit("manifests valid again; resuming from them", event="valid",
                      role="manifests", verb="valid", reason="fixed")
            self.store.add_event(events.manifests_valid(git_commit=result.git_commit,
                                                        at=self._wall()))
        self._problems = ()
        self.last_good = result.desired
        texts = tuple(str(w) for w in result.warnings)
        if texts != self._warnings:
            logs.log_warnings(result.warnings)
            self._warnings = texts

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

    # ------------------------------------------------------------ metrics

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
            result = self._apply_pass(attrs.evolve(self.template, allow_empty=True,
                                                   desired=stopped))
            self._logged = logs.log_pass(result, None)
        except Exception:
            logs.emit("stopping the managed servers failed", level=logging.ERROR,
                      exc_info=True, event="error")
