"""``reconcile --once`` / ``apply``, ``plan`` and ``start`` (SHELL)."""

from __future__ import annotations

import sys

import attrs

from reconciler.commands import common
from reconciler.commands.common import PlanOptions, StartOptions
from reconciler.commands.options import GlobalOptions
from reconciler.core.decisions import NEEDS_OPERATOR, Decision
from reconciler.core.errors import LockHeld
from reconciler.core.exitcodes import Exit
from reconciler.core.instances import group_of
from reconciler.engine import loop
from reconciler.planner import render
from reconciler.repo import sources
from reconciler.state.lock import Lock


@attrs.frozen(kw_only=True)
class ApplyOptions:
    """``apply`` and ``--once``; ``start`` runs its pass with the defaults and its ``--json``."""

    json: bool = False
    dry_run: bool = False
    allow_empty: bool = False
    metrics_file: str | None = None


def run_plan(g: GlobalOptions, o: PlanOptions) -> int:
    """Observe and plan; change nothing. Reads the store without taking the lock.

    (``plan --offline`` is ``fleet.run_offline_plan``: the command table sends it there.)
    """
    with common.open_store(g) as store:
        result = loop.plan_pass(common.pass_inputs(g, store, allow_empty=o.allow_empty))
        reserved = {r.name: r.reserved for r in store.roles()}
    if result.problems:
        return common.report_problems(result.problems)
    common.report_warnings(result.warnings)
    if o.json:
        from reconciler.planner import memoryview

        ledger = memoryview.host_ram(result.plan, reserved, result.desired, applied=False)
        common.print_json({"plan": render.as_json(result.plan), "git_commit": result.git_commit,
                           "ledger": memoryview.as_json(ledger)})
    else:
        common.print_text(render.text(result.plan))
    if o.detailed_exitcode and (result.plan.changes or result.plan.fetches):
        return Exit.CHANGES
    return Exit.OK


def run_apply(g: GlobalOptions, o: ApplyOptions) -> int:
    """One pass under the lock: ``reconcile --once``."""
    if o.dry_run:
        return run_plan(g, PlanOptions(json=o.json, allow_empty=o.allow_empty))
    with common.locked(g) as store:
        # Starts a `reconcile start` queued while another run held the lock (cron).
        return _pass_and_report(g, o, store, _take_operator_starts(store))


def run_start(g: GlobalOptions, o: StartOptions) -> int:
    """Operator start: clear a terminal state, reset restarts, run a whole pass now.

    When ``reconcile watch`` holds the lock the start is handed to it
    (``commands/handoff.py``) instead of failing on the lock. The pass is
    ``apply``'s with its defaults: no empty set stops anything, no metrics file.
    """
    loaded = sources.load_desired(common.manifest_paths(g), node=common.node_choice(g))
    if loaded.problems:
        return common.report_problems(loaded.problems)
    if loaded.desired.role(o.name) is None:
        elsewhere = dict(loaded.desired.placed_elsewhere).get(o.name)
        where = "" if elsewhere is None else (
            f" for node {loaded.desired.node.name!r}: it is placed on "
            f"{', '.join(elsewhere) or 'no node'}")
        print(f"reconcile: error: no role {o.name!r} in the manifests{where}",
              file=sys.stderr)
        return Exit.ERROR
    names = _instances(loaded.desired, o.name)
    lock = Lock(common.state_dir(g))
    try:
        lock.acquire(timeout=g.lock_timeout or 0.0)
    except LockHeld:
        from reconciler.commands import handoff  # (signals, the lock holder's pid)

        return handoff.hand_over(g, o, lock, names)
    try:
        with common.open_store(g) as store:
            return _pass_and_report(g, ApplyOptions(json=o.json), store,
                                    _take_operator_starts(store, *names))
    finally:
        lock.release()


def _instances(desired, name: str) -> tuple[str, ...]:
    """§12 what ``reconcile start NAME`` starts: every instance of a role with replicas
    (``chat`` → ``chat``, ``chat/1``, …), or the one instance named (``chat/1``)."""
    if "/" in name:
        return (name,)
    return tuple(sorted(r.name for r in desired.roles if group_of(r.name) == name))


def _take_operator_starts(store, *names: str) -> frozenset[str]:
    """The queued operator starts plus ``names``, each applied to the store (§4)."""
    starts = store.take_starts() | frozenset(names)
    for name in sorted(starts):
        store.operator_start(name)
    return starts


def _pass_and_report(g: GlobalOptions, o: ApplyOptions, store,
                     operator_starts: frozenset[str]) -> int:
    result = loop.apply_pass(common.pass_inputs(g, store, allow_empty=o.allow_empty,
                                                operator_starts=operator_starts))
    if o.metrics_file:
        # prometheus_client is loaded only when metrics are asked for.
        from reconciler.report import metrics

        metrics.write_file(o.metrics_file, result, store)
    if g.log_format == "json":
        from reconciler.report import logs

        # Machine-readable lines on stderr for log collectors; the human plan
        # and outcomes below stay on stdout (text logs would only repeat them).
        logs.setup("json")
        if result.problems:
            logs.log_problems(result.problems, kept_last_good=False)
        else:
            logs.log_pass(result)
    if result.problems:
        return common.report_problems(result.problems)
    common.report_warnings(result.warnings)
    if o.json:
        common.print_json({
            "plan": render.as_json(result.plan),
            "outcomes": [_outcome_json(o) for o in result.outcomes],
            "git_commit": result.git_commit,
        })
    else:
        common.print_text("\n".join([render.text(result.plan).rstrip("\n"),
                                     *_outcome_lines(result.outcomes)]))
    # A refusal found while acting (a model that fails verification at spawn) or a
    # new server found exposed needs an operator, exactly as if the plan had found it.
    failed = [o for o in result.outcomes if not (o.ok or o.skipped)]
    if any(not o.needs_operator for o in failed):
        return Exit.ERROR
    if (any(_needs_operator(d) for d in result.plan.decisions)
            or any(o.needs_operator for o in result.outcomes)):
        return Exit.OPERATOR
    return Exit.OK


def _needs_operator(decision: Decision) -> bool:
    return decision.status in NEEDS_OPERATOR


def _outcome_lines(outcomes) -> list[str]:
    lines = []
    for o in outcomes:
        if o.skipped:
            mark = "skipped"
        else:
            mark = "done" if o.ok else "FAILED"
        text = o.text()
        lines.append(f"  {o.role}: {o.verb} {mark}" + (f" ({text})" if text else ""))
    return lines


def _outcome_json(o) -> dict:
    return {"role": o.role, "verb": str(o.verb), "ok": o.ok, "skipped": o.skipped,
            "detail": o.text(), "pid": o.pid}
