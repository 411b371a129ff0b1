"""``reconcile --once`` / ``apply``, ``plan`` and ``start`` (SHELL)."""

from __future__ import annotations

import json
import sys

from reconciler.core.exitcodes import Exit
from reconciler.commands import common
from reconciler.core.decisions import Decision, NEEDS_OPERATOR


def run_plan(args) -> int:
    """Observe and plan; change nothing. Reads the store without taking the lock."""
    if getattr(args, "offline", False):
        from reconciler.commands.fleet import run_offline_plan

        return run_offline_plan(args)
    from reconciler.engine import loop
    from reconciler.planner import render

    with common.open_store(args) as store:
        result = loop.plan_pass(loop.PassInputs(
            paths=common.manifest_paths(args), store=store, state_dir=common.state_dir(args),
            allow_empty=args.allow_empty, node=common.node_choice(args)))
        reserved = {r.name: r.reserved for r in store.roles()}
    if result.problems:
        return common.report_problems(result.problems)
    common.report_warnings(result.warnings)
    if args.json:
        from reconciler.planner import memoryview

        ledger = memoryview.host_ram(result.plan, reserved, result.desired, applied=False)
        print(json.dumps({"plan": render.as_json(result.plan), "git_commit": result.git_commit,
                          "ledger": memoryview.as_json(ledger)}, indent=2))
    else:
        print(render.text(result.plan).rstrip("\n"))
    if args.detailed_exitcode and (result.plan.changes or result.plan.fetches):
        return Exit.CHANGES
    return Exit.OK


def run_apply(args) -> int:
    """One pass under the lock: ``reconcile --once``."""
    if args.dry_run:
        args.detailed_exitcode = False
        return run_plan(args)
    with common.locked(args) as store:
        # Starts a `reconcile start` queued while another run held the lock (cron).
        return _pass_and_report(args, store, _take_operator_starts(store))


def run_start(args) -> int:
    """Operator start: clear a terminal state, reset restarts, run a whole pass now.

    When ``reconcile watch`` holds the lock the start is handed to it
    (``commands/handoff.py``) instead of failing on the lock.
    """
    from reconciler.repo import sources
    from reconciler.core.errors import LockHeld
    from reconciler.state.lock import Lock

    args.allow_empty = False
    args.metrics_file = None
    loaded = sources.load_desired(common.manifest_paths(args), node=common.node_choice(args))
    if loaded.problems:
        return common.report_problems(loaded.problems)
    if loaded.desired.role(args.name) is None:
        elsewhere = dict(loaded.desired.placed_elsewhere).get(args.name)
        where = "" if elsewhere is None else (
            f" for node {loaded.desired.node.name!r}: it is placed on "
            f"{', '.join(elsewhere) or 'no node'}")
        print(f"reconcile: error: no role {args.name!r} in the manifests{where}",
              file=sys.stderr)
        return Exit.ERROR
    lock = Lock(common.state_dir(args))
    try:
        lock.acquire(timeout=getattr(args, "lock_timeout", 0.0) or 0.0)
    except LockHeld:
        from reconciler.commands import handoff

        return handoff.hand_over(args, lock)
    try:
        with common.open_store(args) as store:
            return _pass_and_report(args, store, _take_operator_starts(store, args.name))
    finally:
        lock.release()


def _take_operator_starts(store, *names: str) -> frozenset[str]:
    """The queued operator starts plus ``names``, each applied to the store (§4)."""
    starts = store.take_starts() | frozenset(names)
    for name in sorted(starts):
        store.operator_start(name)
    return starts


def _pass_and_report(args, store, operator_starts: frozenset[str]) -> int:
    from reconciler.engine import loop
    from reconciler.planner import render

    result = loop.apply_pass(loop.PassInputs(
        paths=common.manifest_paths(args), store=store, state_dir=common.state_dir(args),
        allow_empty=getattr(args, "allow_empty", False), operator_starts=operator_starts,
        node=common.node_choice(args)))
    if getattr(args, "metrics_file", None):
        from reconciler.report import metrics

        metrics.write_file(args.metrics_file, result, store)
    if getattr(args, "log_format", "text") == "json":
        # Machine-readable lines on stderr for log collectors; the human plan
        # and outcomes below stay on stdout (text logs would only repeat them).
        from reconciler.report import logs

        logs.setup("json")
        if result.problems:
            logs.log_problems(result.problems, kept_last_good=False)
        else:
            logs.log_pass(result)
    if result.problems:
        return common.report_problems(result.problems)
    common.report_warnings(result.warnings)
    if args.json:
        print(json.dumps({
            "plan": render.as_json(result.plan),
            "outcomes": [_outcome_json(o) for o in result.outcomes],
            "git_commit": result.git_commit,
        }, indent=2))
    else:
        print(render.text(result.plan).rstrip("\n"))
        for line in _outcome_lines(result.outcomes):
            print(line)
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
