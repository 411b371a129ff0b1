"""``reconcile fleet [--json] [--diff REV]`` and ``reconcile plan --offline`` (SHELL; §10).

Both work from the manifests alone: no probe, no process table, no state
store, so a CI job can run them on any machine. ``fleet`` shows every node's
offline plan (``fleetview``); ``--diff REV`` compares it with the manifests
at git revision ``REV`` (``gitrev``: nothing is checked out) and prints one
line per node or role that changes (``fleetdiff``). Exit codes as ``plan
--detailed-exitcode``: with ``--diff``, 0 no changes, 2 changes; 1 an error
(invalid manifests on either side, an unknown revision).
"""

from __future__ import annotations

import json
import sys

from reconciler.commands import common
from reconciler.core.exitcodes import Exit


def run(args) -> int:
    from reconciler.fleet import fleetview
    from reconciler.repo import sources

    paths = common.manifest_paths(args)
    loaded = sources.load_desired(paths)
    if loaded.problems or loaded.fleet is None:
        return common.report_problems(loaded.problems)
    common.report_warnings(loaded.warnings)
    implicit = common.node_choice(args).name
    now = fleetview.view(loaded.fleet, implicit=implicit)
    if args.diff:
        return _diff(args, paths, now, implicit)
    if args.json:
        print(json.dumps(fleetview.as_json(now), indent=2, ensure_ascii=False))
    else:
        print(fleetview.text(now).rstrip("\n"))
    return Exit.OK


def _diff(args, paths: list[str], now, implicit: str) -> int:
    from reconciler.fleet import fleetdiff, fleetview
    from reconciler.repo import gitrev
    from reconciler.manifests import loader
    from reconciler.core.errors import sorted_problems

    where: dict[str, tuple[str, str]] = {}
    files, refused = gitrev.manifests_at(args.diff, paths, where)
    before = loader.load(files, repo_files=gitrev.RepoFilesAt(args.diff, where))
    problems = sorted_problems([*before.problems, *refused])
    if problems or before.fleet is None:
        for problem in problems:
            print(str(problem), file=sys.stderr)
        print(f"reconcile: the manifests at {args.diff} have {len(problems)} problem(s); "
              "no diff", file=sys.stderr)
        return Exit.ERROR
    changes = fleetdiff.diff(fleetview.view(before.fleet, implicit=implicit), now)
    if args.json:
        print(json.dumps({**fleetdiff.as_json(changes), "rev": args.diff}, indent=2,
                         ensure_ascii=False))
    else:
        print(fleetdiff.text(changes).rstrip("\n"))
    return Exit.CHANGES if changes else Exit.OK


def run_offline_plan(args) -> int:
    """``reconcile plan --offline``: this node's plan from the manifests alone."""
    from reconciler.fleet import offline
    from reconciler.planner import render
    from reconciler.repo import sources
    from reconciler.repo.gitcommit import manifests_commit

    paths = common.manifest_paths(args)
    loaded = sources.load_desired(paths, node=common.node_choice(args))
    if loaded.problems or loaded.desired is None:
        return common.report_problems(loaded.problems)
    common.report_warnings(loaded.warnings)
    plan = offline.plan(loaded.desired)
    if args.json:
        print(json.dumps({"plan": render.as_json(plan), "git_commit": manifests_commit(paths),
                          "node": loaded.desired.node.name, "offline": True}, indent=2))
    else:
        print(render.text(plan).rstrip("\n"))
    if args.detailed_exitcode and plan.changes:
        return Exit.CHANGES
    return Exit.OK
