"""One reconcile pass, room by room (SHELL).

::

    load → remember → re-adopt → observe → plan → act → record      (show: the caller)

``apply_pass(inputs)`` is what ``reconcile --once``/``apply``, ``start`` and
every iteration of ``watch`` run; the caller holds the lock. ``plan_pass``
is ``plan``, ``apply --dry-run`` and ``status``: the same rooms up to the
plan, and nothing written to the store (the servers re-adoption would record
are shown as if recorded). Level-triggered: each pass re-reads every manifest
and re-observes every server; nothing carries over but what the store
remembers. An invalid manifest set acts on nothing.

Each room is one call into the module that owns it:

=========  ==========================================================
load       ``sources.load_desired``; ``gitcommit.manifests_commit``
remember   ``store.roles()`` → ``Remembered``
re-adopt   ``readopt.survey``: unrecorded servers of ours, re-adopted or
           orphaned (``readopt.record`` writes the re-adopted when applying)
observe    ``observe.observe``: probes, process table, model checks
plan       ``plan.plan`` (pure)
act        ``act.act``: ``execute.apply`` with the spawn hooks
record     ``recording.record_pass``; ``instances.cap_server_logs``;
           ``instances.sweep`` (directories of instances nobody wants)
=========  ==========================================================
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Iterable

import attrs

from reconciler.world import instances
from reconciler.engine import readopt
from reconciler.core.decisions import Plan, PlanContext
from reconciler.core.demand import Demand
from reconciler.core.desired import Desired
from reconciler.core.errors import Problem
from reconciler.manifests.fleet import NodeChoice
from reconciler.core.observed import Observed, Orphan, Remembered

if TYPE_CHECKING:  # only a pass that acts makes outcomes
    from reconciler.core.outcomes import Outcome
    from reconciler.engine.seams import Gate, PassStore, Verifier


def _paths(paths: Iterable[str]) -> tuple[str, ...]:
    # Not ``converter=tuple``: attrs would read a builtin's signature from its
    # text, compiling ``tokenize``'s patterns (milliseconds of every --once run).
    return tuple(paths)


@attrs.frozen(kw_only=True)
class PassInputs:
    """Everything one pass starts from."""

    paths: tuple[str, ...] = attrs.field(converter=_paths)  # the manifests (and their git commit)
    store: PassStore  # remembered state and events (``state/store.Store``); the caller holds the lock
    state_dir: str
    desired: Desired | None = None  # given: the manifests are not read (watch's last good state)
    node: NodeChoice | None = None  # which node this is (§10); None: a set's only node
    allow_empty: bool = False  # an empty manifest set may stop running servers
    operator_starts: frozenset[str] = frozenset()  # roles named by `reconcile start`
    verifier: Verifier | None = None  # §1.1 before a spawn; default: ``modelstore.Verifier(store)``
    demand: Demand | None = None  # §9 the router's counts (watch only); None: no demand known
    gate: Gate | None = None  # §9 the router (``Router``): drain before a stop, watch after a spawn
    clock: Callable[[], float] = time.time


@attrs.frozen(kw_only=True)
class PassResult:
    """What a pass saw, decided and did."""

    problems: tuple[Problem, ...] = ()  # manifest problems: nothing was done
    warnings: tuple[Problem, ...] = ()
    desired: Desired | None = None
    observed: Observed | None = None
    plan: Plan | None = None
    outcomes: tuple[Outcome, ...] = ()  # in plan order
    git_commit: str | None = None
    started: float = 0.0
    duration: float = 0.0
    node: str = ""  # the node named by --node / $RECONCILER_NODE ("" when none was)
    rollout: tuple[str, ...] = ()  # §13 the node's place in each rollout (`status`)
    #: §13 (role, commit) of each staged role: the revision it runs (others: ``git_commit``)
    revisions: tuple[tuple[str, str], ...] = ()
    rolled_back: tuple[tuple[str, str], ...] = ()  # §13 (role, failed commit) in force

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.ok or o.skipped for o in self.outcomes)


def plan_pass(inputs: PassInputs) -> PassResult:
    """Load, remember, observe and plan; act on nothing and write nothing to the store."""
    began = _Began(inputs)
    loaded = _load(inputs)
    if loaded.problems or loaded.desired is None:
        return began.refused(loaded)
    remembered = Remembered(roles=inputs.store.roles())
    staged = _staged(inputs, loaded, began, remembered)
    desired = staged.desired if staged is not None else loaded.desired
    root = instances.data_root(desired, inputs.state_dir)
    # Shown as an applying pass would see them: with the re-adopted records.
    found = readopt.survey(remembered, desired, root)
    remembered = readopt.merged(remembered, found.readopted)
    observed, the_plan = _observe_and_plan(inputs, desired, remembered, root, found.orphans,
                                           records=False)
    if staged is not None:
        from reconciler.engine import rolloutpass

        the_plan = rolloutpass.mark(the_plan, staged.choices)
    return began.result(loaded, observed, the_plan, staged=staged)


def apply_pass(inputs: PassInputs) -> PassResult:
    """The whole pass, acting and recording. The caller holds the lock."""
    from reconciler.engine import act, recording

    began = _Began(inputs)
    loaded = _load(inputs)
    if loaded.problems or loaded.desired is None:
        return began.refused(loaded)
    remembered = Remembered(roles=inputs.store.roles())
    staged = _staged(inputs, loaded, began, remembered)
    desired = staged.desired if staged is not None else loaded.desired
    root = instances.data_root(desired, inputs.state_dir)
    found = readopt.survey(remembered, desired, root)
    readopt.record(inputs.store, found.readopted, at=inputs.clock())
    remembered = readopt.merged(remembered, found.readopted)
    observed, the_plan = _observe_and_plan(inputs, desired, remembered, root, found.orphans)
    if staged is not None:  # §13 what each staged role runs is durable before anything acts
        from reconciler.engine import rolloutpass

        the_plan = rolloutpass.mark(the_plan, staged.choices)
        rolloutpass.write_runs(inputs.state_dir, staged.runs)
        from reconciler.system import failpoints

        failpoints.reach("rollout-written")
        rolloutpass.record_rollbacks(inputs.store, staged, git_commit=began.git_commit,
                                     at=inputs.clock())
    elif loaded.fleet is not None and os.path.exists(  # (watch's last good state: no fleet)
            os.path.join(inputs.state_dir, "rollout.json")):  # rolloutpass.FILE, not imported
        from reconciler.engine import rolloutpass

        rolloutpass.forget(inputs.state_dir)
    if the_plan.fetches:  # §1.6 detached: the pass never waits for a download
        from reconciler.core import events
        from reconciler.world import fetches

        for planned in the_plan.fetches:
            failure = fetches.start(planned, desired, inputs.store, inputs.clock())
            inputs.store.add_event(events.fetch_started(
                planned.model, planned.why, failure, git_commit=began.git_commit,
                at=inputs.clock()))
    outcomes = act.act(the_plan, desired, inputs.store, verifier=inputs.verifier, root=root,
                       clock=inputs.clock, gate=inputs.gate)
    recording.record_pass(inputs.store, desired, observed, the_plan, outcomes,
                          git_commit=began.git_commit, now=inputs.clock(), root=root,
                          operator_starts=inputs.operator_starts)
    if outcomes:
        recording.ended(inputs.store, root, inputs.clock())
    kept = inputs.store.roles()
    instances.cap_server_logs(kept, root)
    instances.sweep(root, instances.wanted_ids(desired, kept))
    return began.result(loaded, observed, the_plan, outcomes, staged=staged)


# ---------------------------------------------------------------- the rooms' details


def _load(inputs: PassInputs):
    """The desired state, or every problem with it (``manifests.LoadResult``)."""
    from reconciler.repo import sources
    from reconciler.manifests.loader import LoadResult

    if inputs.desired is not None:
        return LoadResult(desired=inputs.desired)
    return sources.load_desired(inputs.paths, cache_dir=inputs.state_dir, node=inputs.node)


def _staged(inputs: PassInputs, loaded, began: "_Began", remembered: Remembered):
    """§13 HEAD's share with each staged role at the revision the node runs (None: no rollout,
    or no commit known: a rollout needs git to know what a node ran)."""
    fleet = loaded.fleet
    if fleet is None or not fleet.rollouts or not began.git_commit:
        return None
    from reconciler.engine import rolloutpass

    return rolloutpass.stage(paths=inputs.paths, fleet=fleet, desired=loaded.desired,
                             node=inputs.node, head=began.git_commit, state_dir=inputs.state_dir,
                             records={r.name: r for r in remembered.roles},
                             now=rolloutpass.now(inputs.clock), wall=inputs.clock())


def _observe_and_plan(inputs: PassInputs, desired: Desired, remembered: Remembered,
                      root: str, orphans: tuple[Orphan, ...] = (), *,
                      records: bool = True) -> tuple[Observed, Plan]:
    from reconciler.world import observe
    from reconciler.planner import plan

    sticky = inputs.store.sticky_mismatches()
    if desired.programs:  # §14 every Program a role runs, looked at (stamps) before planning
        from reconciler.models import programstore

        sticky = programstore.refreshed(desired, inputs.store, sticky, record=records)
    observed = observe.observe(desired, remembered, probe_timeout=desired.node.probe_timeout,
                               sticky=sticky, root=root, records=records)
    if orphans:
        observed = attrs.evolve(observed, orphans=orphans)
    if desired.node.fetch is not None:  # §1.6 only a node that fetches looks at its cache
        from reconciler.world import fetches

        observed = attrs.evolve(observed, fetches=fetches.observe(
            desired, inputs.store.fetches(), inputs.clock()))
    if inputs.demand is not None:  # §9 observed like the servers: at the start of the pass
        observed = attrs.evolve(observed, demand=inputs.demand)
    ctx = PlanContext(
        allow_empty=inputs.allow_empty, operator_starts=frozenset(inputs.operator_starts),
        environ=tuple(sorted(os.environ.items())), data_root=root,
    )
    return observed, plan.plan(desired, observed, remembered, ctx, inputs.clock())


class _Began:
    """When a pass began (wall clock for the record, monotonic for its duration), and its commit.

    A plain class: it never leaves this module, and an attrs class costs a
    cron run its creation.
    """

    __slots__ = ("started", "t0", "git_commit", "node")

    def __init__(self, inputs: PassInputs) -> None:
        from reconciler.repo.gitcommit import manifests_commit

        self.started, self.t0 = inputs.clock(), time.monotonic()
        self.git_commit = manifests_commit(inputs.paths)
        given = inputs.node
        self.node = given.name if given is not None and given.explicit else ""

    def refused(self, loaded) -> PassResult:
        return PassResult(problems=tuple(loaded.problems), warnings=tuple(loaded.warnings),
                          git_commit=self.git_commit, started=self.started, node=self.node)

    def result(self, loaded, observed: Observed, the_plan: Plan,
               outcomes: tuple[Outcome, ...] = (), staged=None) -> PassResult:
        return PassResult(warnings=tuple(loaded.warnings),
                          desired=staged.desired if staged is not None else loaded.desired,
                          observed=observed, plan=the_plan, outcomes=tuple(outcomes),
                          git_commit=self.git_commit, started=self.started,
                          duration=time.monotonic() - self.t0, node=self.node,
                          rollout=staged.position if staged is not None else (),
                          revisions=staged.revisions() if staged is not None else (),
                          rolled_back=staged.rolled_back() if staged is not None else ())
