"""``reconcile validate [PATH…]``: check manifests without touching anything (SHELL).

Static by design: it reads the manifest files and nothing else — no model
files, no launchers, no network. Every problem is printed as
``FILE:LINE: $.json.path: message``, sorted; the exit code is 1 if there is
any, else 0 with a one-line summary (``7 documents: 2 Model, …``). Warnings go
to stderr. ``--json`` prints the problems as a JSON list of
``{file, line, path, message}`` instead (``[]`` when all is well).
"""

from __future__ import annotations

import json
import sys

import attrs

from reconciler.commands import options as opt
from reconciler.commands.options import GlobalOptions
from reconciler.core.errors import shown_json
from reconciler.repo import sources


@attrs.frozen(kw_only=True)
class ValidateOptions:
    paths: tuple[str, ...] = attrs.field(default=(), converter=opt.tuple_of)
    json: bool = False


def run(g: GlobalOptions, o: ValidateOptions) -> int:
    paths = list(o.paths) or [g.manifests]
    result = sources.load_desired(paths)
    for warning in sorted((*result.warnings, *result.unpinned)):
        print(f"{warning.file}:{warning.line}: {warning.path}: warning: {warning.message}",
              file=sys.stderr)
    if o.json:
        print(shown_json(json.dumps([p.as_dict() for p in result.problems], indent=2,
                                    ensure_ascii=False)))
    else:
        for problem in result.problems:
            print(problem)
    if result.problems:
        if not o.json:
            count = len(result.problems)
            sys.stdout.flush()  # problems first, then the count, also when both go to one terminal
            print(f"{count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        return 1
    if not sum(result.counts.values()):
        print(f"warning: no manifest documents in {', '.join(paths)} "
              "(directories are read for *.yaml and *.yml, not recursively)", file=sys.stderr)
    if not o.json:
        print(result.summary)
    return 0
