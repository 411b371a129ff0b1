"""``reconcile fleet [--json] [--diff REV | --rollout [--at TIME]]``, ``plan --offline`` (SHELL; §10).

Both work from the manifests alone: no probe, no process table, no state
store, so a CI job can run them on any machine. ``fleet`` shows every node's
offline plan (``fleetview``); ``--diff REV`` compares it with the manifests
at git revision ``REV`` (``gitrev``: nothing is checked out) and prints one
line per node or role that changes (``fleetdiff``). ``--rollout`` shows every
node's turn in each Rollout at ``--at`` (§13, ``rolloutview``), gates unasked
unless ``--ask-gates`` (one query per later wave, about the checked-out commit). Exit codes as ``plan
--detailed-exitcode``: with ``--diff``, 0 no changes, 2 changes; 1 an error
(invalid manifests on either side, an unknown revision).
"""

from __future__ import annotations

import gc
import sys

import attrs

from reconciler.commands import common
from reconciler.commands.common import PlanOptions
from reconciler.commands.options import GlobalOptions
from reconciler.core.errors import sorted_problems
from reconciler.core.exitcodes import Exit
from reconciler.fleet import fleetdiff, fleetview, offline
from reconciler.manifests import loader
from reconciler.planner import render
from reconciler.repo import gitrev, sources
from reconciler.repo.gitcommit import manifests_commit


@attrs.frozen(kw_only=True)
class FleetOptions:
    json: bool = False
    diff: str | None = None
    rollout: bool = False  # §13
    ask_gates: bool = False  # with rollout: ask the Prometheus gates (not offline)
    at: str | None = None  # with rollout: an RFC 3339 time; None: now


def run(g: GlobalOptions, o: FleetOptions) -> int:
    if ((o.at is not None or o.ask_gates) and not o.rollout) or (o.rollout and o.diff):
        print("reconcile: fleet: --at and --ask-gates go with --rollout, and --rollout not "
              "with --diff", file=sys.stderr)
        return Exit.ERROR
    paths = common.manifest_paths(g)
    loaded = sources.load_desired(paths)
    if loaded.problems or loaded.fleet is None:
        return common.report_problems(loaded.problems)
    common.report_warnings(loaded.warnings)
    implicit = common.node_choice(g).name
    # Planning 10,000 nodes makes a million long-lived values and next to no
    # cycles: the cyclic collector would walk them (and the loaded fleet) again
    # and again (bench/bench_fleet.py --devices, 10,000 nodes: planning 4.3 → 3.8 s
    # of CPU). Paused while this command plans and prints, then as it was.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _show(o, paths, loaded, implicit)
    finally:
        if enabled:
            gc.enable()


def _show(o: FleetOptions, paths: list[str], loaded, implicit: str) -> int:
    if o.rollout:
        return _rollout(o, paths, loaded, implicit)
    now = fleetview.view(loaded.fleet, implicit=implicit)
    if o.diff:
        return _diff(o, paths, now, implicit, loaded.fleet.rollouts)
    if o.json:
        common.print_json(fleetview.as_json(now), ensure_ascii=False)
    else:
        common.print_text(fleetview.text(now))
    return Exit.OK


def _diff(o: FleetOptions, paths: list[str], now, implicit: str, rollouts=()) -> int:
    where: dict[str, tuple[str, str]] = {}
    files, refused = gitrev.manifests_at(o.diff, paths, where)
    before = loader.load(files, repo_files=gitrev.RepoFilesAt(o.diff, where))
    problems = sorted_problems([*before.problems, *refused])
    if problems or before.fleet is None:
        for problem in problems:
            print(str(problem), file=sys.stderr)
        print(f"reconcile: the manifests at {o.diff} have {len(problems)} problem(s); "
              "no diff", file=sys.stderr)
        return Exit.ERROR
    changes = fleetdiff.staged(fleetdiff.diff(fleetview.view(before.fleet, implicit=implicit),
                                              now), now, rollouts)
    if o.json:
        common.print_json({**fleetdiff.as_json(changes), "rev": o.diff}, ensure_ascii=False)
    else:
        common.print_text(fleetdiff.text(changes))
    return Exit.CHANGES if changes else Exit.OK


def _rollout(o: FleetOptions, paths: list[str], loaded, implicit: str) -> int:
    """§13 every node's turn at ``--at`` (default now); the gates are not asked (offline)."""
    import time

    from reconciler.fleet import rolloutview
    from reconciler.manifests.rolloutdoc import parse_time

    try:
        at = parse_time(o.at) if o.at is not None else time.time()
    except ValueError as err:
        print(f"reconcile: --at: {err}", file=sys.stderr)
        return Exit.ERROR
    gates = _ask_gates(paths, loaded.fleet, implicit) if o.ask_gates else None
    shown = rolloutview.view(loaded.fleet, at, gates, implicit=implicit)
    if o.json:
        common.print_json(rolloutview.as_json(shown), ensure_ascii=False)
    else:
        common.print_text(rolloutview.text(shown))
    return Exit.OK


def _ask_gates(paths: list[str], whole, implicit: str) -> dict:
    """Each later wave's gate, asked about the revision checked out (its commit)."""
    from reconciler.fleet import rolloutview
    from reconciler.world.gate import PrometheusAsk

    revision = (manifests_commit(paths) or "").removesuffix("+dirty")
    ask = PrometheusAsk()
    return {(rollout.name, wave): ask.ask(rollout, wave, revision=revision, nodes=nodes)
            for rollout, wave, nodes in rolloutview.questions(whole, implicit=implicit)}


def run_offline_plan(g: GlobalOptions, o: PlanOptions) -> int:
    """``reconcile plan --offline``: this node's plan from the manifests alone."""
    paths = common.manifest_paths(g)
    loaded = sources.load_desired(paths, node=common.node_choice(g))
    if loaded.problems or loaded.desired is None:
        return common.report_problems(loaded.problems)
    common.report_warnings(loaded.warnings)
    plan = offline.plan(loaded.desired)
    if o.json:
        common.print_json({"plan": render.as_json(plan), "git_commit": manifests_commit(paths),
                           "node": loaded.desired.node.name, "offline": True})
    else:
        common.print_text(render.text(plan))
    if o.detailed_exitcode and plan.changes:
        return Exit.CHANGES
    return Exit.OK
