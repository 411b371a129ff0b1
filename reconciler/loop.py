"""One reconcile pass: load → observe → plan → execute → record (SHELL).

``run_pass`` is what ``reconcile --once``, ``plan``, ``start`` and every
iteration of ``watch`` do. It is level-triggered: each pass re-reads every
manifest and re-observes every server; nothing carries over but what the
state store remembers. An invalid manifest set acts on nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Callable, Sequence

import attrs

from reconciler import records
from reconciler.decisions import Decision, Plan, PlanContext, Verb
from reconciler.desired import Desired
from reconciler.observed import ModelCheck, ModelState, Observed, Remembered, RoleRecord
from reconciler.runtimes import spec_of


@attrs.frozen(kw_only=True)
class PassResult:
    """What a pass saw, decided and did."""

    problems: tuple = ()  # manifest problems: nothing was done
    warnings: tuple = ()
    desired: Desired | None = None
    observed: Observed | None = None
    plan: Plan | None = None
    outcomes: tuple = ()  # execute.Outcome, in plan order
    git_commit: str | None = None
    started: float = 0.0
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.ok or o.skipped for o in self.outcomes)


def manifests_commit(paths: Sequence[str]) -> str | None:
    """The git commit of the manifests' checkout, if they live in one.

    ``<sha>+dirty`` when the manifests differ from that commit (uncommitted
    edits, untracked files): the commit alone would claim what was applied.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for path in paths:
        folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
        try:
            head = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=5, env=env)
            if head.returncode != 0:
                continue
            dirty = subprocess.run(
                ["git", "-C", folder, "status", "--porcelain", "--", "."],
                capture_output=True, text=True, timeout=5, env=env)
        except (OSError, subprocess.SubprocessError):
            return None
        commit = head.stdout.strip()
        return f"{commit}+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else commit
    return None


def data_root(desired: Desired, state_dir: str) -> str:
    return desired.node.data_root or os.path.join(state_dir, "instances")


def readoptable(store, desired: Desired, root: str) -> list[RoleRecord]:
    """Records for our own servers that a killed reconciler spawned but never recorded.

    A process is taken back only when it carries a desired role's instance
    marker, leads its own group, runs as the ``run_as`` uid (or ours) and
    works in that instance's directory: what ``spawn`` makes. Recording it
    means the next plan keeps it instead of starting a second server. Its
    launch digest is the current one only if its argv and environment are
    exactly the current launch's; otherwise a restart follows (spec_changed).
    It holds its footprint in the ledger like any server we run.
    """
    from reconciler import identity, procs

    wanted = {}
    for role in desired.roles:
        if not role.managed or not spec_of(role.runtime).launched:
            continue
        record = store.role(role.name)
        if record is not None and procs.is_owned(record.pid, record.create_time,
                                                 record.instance_id):
            continue
        wanted[identity.instance_id(role)] = (role, record)
    if not wanted:
        return []
    uid = desired.node.run_as.uid if desired.node.run_as else os.geteuid()
    cwds = {iid: os.path.join(root, iid) for iid in wanted}
    models = {m.name: m for m in desired.models}
    out = []
    for iid, hits in sorted(procs.find_marked(wanted, cwds=cwds, uid=uid).items()):
        role, record = wanted[iid]
        pid, ctime, cmdline, environ = max(hits, key=lambda h: h[1])
        launch = identity.launch(role, models, desired.node, os.environ, root)
        same = (launch is not None and environ == dict(launch.env)
                and _runs(cmdline, launch.argv))
        base = record or records.new_record(role, Decision(
            role=role.name, verb=Verb.START, reason=records.Reason.MISSING, instance_id=iid))
        out.append(attrs.evolve(
            base, instance_id=iid, pid=pid, create_time=ctime, exited_at=None,
            launch_digest=launch.digest if same else "unknown: re-adopted",
            launch_argv=launch.argv if same else cmdline,
            reserved=role.memory.footprint, terminal=None, terminal_detail="",
        ))
    return out


def _runs(cmdline: tuple[str, ...], argv: tuple[str, ...]) -> bool:
    """Does a process's cmdline run ``argv``? (A script's interpreter comes first.)"""
    if not argv or argv[0] not in cmdline:
        return False
    start = cmdline.index(argv[0])
    return cmdline[start:] == argv


def readopt(store, found: list[RoleRecord]) -> None:
    for record in found:
        store.put_role(record)
        store.record_event(record.name, "adopt", "readopted",
                           f"found our own server pid {record.pid} that was never recorded")


def model_checks(desired: Desired, store) -> tuple[ModelCheck, ...]:
    """Cheap facts about the models managed roles use; full hashing waits for a start.

    A sticky mismatch is refused; a root that has vanished is a detached
    store; everything else is verified right before the spawn that uses it.
    """
    names = set()
    for role in desired.roles:
        if role.managed:
            names.update(n for n in (role.model, role.serve.draft_model) if n)
    checks = []
    for name in sorted(names):
        spec = desired.model(name)
        if spec is None:
            continue
        sticky = store.get_sticky(name)
        if sticky:
            checks.append(ModelCheck(name=name, state=ModelState.MISMATCH, detail=sticky))
        elif spec.root is not None and not os.path.isdir(spec.root):
            state = ModelState.MISMATCH if os.path.exists(spec.root) else ModelState.DETACHED
            detail = ("model store is detached" if state is ModelState.DETACHED
                      else f"model {name}: root {spec.root} is not a directory")
            checks.append(ModelCheck(name=name, state=state, detail=detail))
        else:
            checks.append(ModelCheck(name=name, state=ModelState.UNVERIFIED))
    return tuple(checks)


class _Hooks:
    """The executor's callbacks: verify before a spawn, record right after it."""

    def __init__(self, store, desired: Desired, verifier, now: Callable[[], float]) -> None:
        self.store, self.desired, self.verifier, self.now = store, desired, verifier, now

    def before_start(self, decision: Decision) -> str | None:
        spec = self.desired.role(decision.role)
        if spec is None or not spec_of(spec.runtime).launched:
            return None
        for name in (spec.model, spec.serve.draft_model):
            model = self.desired.model(name)
            if model is None:
                continue
            check = self.verifier.verify(model)
            if check.state is not ModelState.VERIFIED:
                return f"refused: {check.detail or check.state}"
            # Paths handed to the server are re-checked for containment now,
            # right before the spawn, not only when the hashes were computed.
            from reconciler import modelstore

            try:
                modelstore.canonical_paths(model)
            except modelstore.ModelPathError as exc:
                return f"refused: {exc}"
        return None

    def after_spawn(self, decision: Decision, result) -> None:
        # Recorded at once: a reconciler killed right after this line still
        # knows the pid; one killed before it re-adopts by marker (readopt).
        if not result.ok:
            return
        spec = self.desired.role(decision.role)
        record = self.store.role(decision.role)
        if record is None and spec is not None:
            record = records.new_record(spec, decision)
        if record is not None:
            self.store.put_role(attrs.evolve(
                record, pid=result.pid, create_time=result.create_time,
                instance_id=decision.instance_id or record.instance_id))

    def after_action(self, outcome) -> None:
        pass


def run_pass(
    *,
    paths: Sequence[str],
    store,
    state_dir: str,
    allow_empty: bool = False,
    operator_starts: frozenset[str] = frozenset(),
    dry_run: bool = False,
    verifier=None,
    desired_override: Desired | None = None,
    clock: Callable[[], float] = time.time,
) -> PassResult:
    """One whole pass. The caller holds the lock (unless it only plans)."""
    from reconciler import sources

    started = clock()
    t0 = time.monotonic()
    commit = manifests_commit(paths)
    if desired_override is not None:
        desired, warnings = desired_override, ()
    else:
        loaded = sources.load_desired(paths, cache_dir=state_dir)
        if loaded.problems or loaded.desired is None:
            return PassResult(problems=tuple(loaded.problems), warnings=tuple(loaded.warnings),
                              git_commit=commit, started=started)
        desired, warnings = loaded.desired, tuple(loaded.warnings)
    return _converge(desired, warnings, commit, store, state_dir, allow_empty,
                     operator_starts, dry_run, verifier, clock, started, t0)


def _converge(desired, warnings, commit, store, state_dir, allow_empty, operator_starts,
              dry_run, verifier, clock, started, t0) -> PassResult:
    from reconciler import observe, plan as planner

    root = data_root(desired, state_dir)
    found = readoptable(store, desired, root)
    if not dry_run:
        readopt(store, found)
    # A plan-only run shows what apply would do: with the re-adopted records.
    merged = {r.name: r for r in store.roles()} | {r.name: r for r in found}
    remembered = Remembered(roles=tuple(merged[name] for name in sorted(merged)))
    observed = observe.observe(desired, remembered, probe_timeout=desired.node.probe_timeout)
    observed = attrs.evolve(observed, models=model_checks(desired, store))
    ctx = PlanContext(
        allow_empty=allow_empty, operator_starts=frozenset(operator_starts),
        environ=tuple(sorted(os.environ.items())), data_root=root,
    )
    now = clock()
    the_plan = planner.plan(desired, observed, remembered, ctx, now)
    if dry_run:
        return PassResult(warnings=warnings, desired=desired, observed=observed, plan=the_plan,
                          git_commit=commit, started=started,
                          duration=time.monotonic() - t0)

    from reconciler import execute, modelstore

    if verifier is None:
        verifier = modelstore.Verifier(store)
    outcomes = execute.apply(
        the_plan, node=desired.node, allowed=desired.node.port_allowed,
        hooks=_Hooks(store, desired, verifier, clock),
    )
    _record(store, desired, observed, the_plan, outcomes, commit, clock(), root,
            operator_starts)
    _rotate_logs(store, root)
    return PassResult(warnings=warnings, desired=desired, observed=observed, plan=the_plan,
                      outcomes=tuple(outcomes), git_commit=commit, started=started,
                      duration=time.monotonic() - t0)


def _record(store, desired, observed, the_plan, outcomes, commit, now, root,
            operator_starts=frozenset()) -> None:
    by_role = {o.role: o for o in outcomes}
    for decision in the_plan.decisions:
        outcome = by_role.get(decision.role)
        facts = None
        if outcome is not None and decision.acts:
            facts = records.ActionFacts(ok=outcome.ok and not outcome.skipped,
                                        skipped=outcome.skipped,
                                        exited=outcome.exited, pid=outcome.pid,
                                        create_time=outcome.create_time)
        # The spawn hook may have written a fresher record than `remembered`.
        before = store.role(decision.role)
        spec = desired.role(decision.role)
        after = records.after_decision(before, spec, decision, observed.role(decision.role),
                                       facts, now)
        if after is None:
            if before is not None:
                store.delete_role(decision.role)
                _remove_instance_dir(root, before)
        elif after != before:
            store.put_role(after)
        # A role an operator started always gets its decision logged: the
        # answer to its `operator-start` event, even when that is "keep".
        detail = decision.why or decision.detail
        if outcome is not None and outcome.detail:
            detail = f"{detail}; {outcome.detail}" if detail else outcome.detail
        if (decision.acts or decision.role in operator_starts
                or _changed_status(before, after) or _news(store, decision, detail)):
            store.record_event(
                decision.role, str(decision.verb), str(decision.reason), detail,
                ok=None if outcome is None else (outcome.ok and not outcome.skipped),
                git_commit=commit, at=now,
            )


def _rotate_logs(store, root: str) -> None:
    """Keep every running server's log under its cap (it grows between passes)."""
    from reconciler import spawn

    for record in store.roles():
        cwd = os.path.join(root, record.instance_id)
        if record.pid and os.path.isdir(cwd):
            spawn.rotate_log_if_needed(cwd)


def _news(store, decision: Decision, detail: str) -> bool:
    """A decision that is not what this role's last event already says.

    Keeps the append-only log from growing by a line per role per pass
    (a watch pass can come every second) while a role stays as it was.
    """
    last = store.last_event(decision.role)
    return last is None or (last.verb, last.reason, last.detail) != (
        str(decision.verb), str(decision.reason), detail)


def _changed_status(before: RoleRecord | None, after: RoleRecord | None) -> bool:
    if before is None or after is None:
        return before is not after
    return (before.terminal, before.restarts, before.exited_at is None) != (
        after.terminal, after.restarts, after.exited_at is None)


def _remove_instance_dir(root: str, record: RoleRecord) -> None:
    """A forgotten role's working directory goes with it (BEHAVIOUR §6)."""
    if record.instance_id and "/" not in record.instance_id:
        shutil.rmtree(os.path.join(root, record.instance_id), ignore_errors=True)
