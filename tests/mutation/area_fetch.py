"""Mutants of the fetch rules (BEHAVIOUR §1.6) an independent sample found unpinned (issue 27).

Each breaks one rule of the downloader's policy (``models/fetchpolicy.py``), the
Hub's metadata (``models/hub.py``) or the fetch rung (``planner/fetchrungs.py``);
the test that kills it names the rule.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

MODELS, PLAN = "tests/models", "tests/plan"

MUTANTS = (
    mutant("models/fetchpolicy.py", "206-starts-anywhere",
           "if m is None or int(m[1]) != have:", "if m is None:",
           "§1.6: a 206 that does not start at the partial file's size is written at its end "
           "(a spliced file, fetched in full again after the mismatch)", MODELS),
    mutant("models/fetchpolicy.py", "416-always-complete",
           "    if status == 416 and have == size:", "    if status == 416:",
           "§1.6: a 416 to a partial file shorter than the Model is taken as the file complete",
           MODELS),
    mutant("models/fetchpolicy.py", "token-any-port",
           "return mine is not None and mine == origin(other)",
           "return mine is not None and mine[:2] == (origin(other) or ())[:2]",
           "§1.6: the Hub token is sent to another port of the Hub's host", MODELS),
    mutant("models/hub.py", "non-lfs-etag-as-sha256",
           "etag = (headers.get(\"x-linked-etag\") or \"\").strip().removeprefix(\"W/\").strip('\"')"
           "\n    if not _HEX64.match(etag):",
           "etag = (headers.get(\"x-linked-etag\") or headers.get(\"etag\") or \"\").strip()"
           ".removeprefix(\"W/\").strip('\"')\n    if not etag:",
           "§1.6: a Hub file not in LFS is written with its git blob id as its sha256", MODELS),
    mutant("models/hub.py", "commit-any-text",
           "if commit is not None and not _COMMIT.match(commit):", "if False:",
           "§1.6: an X-Repo-Commit that is no commit (a branch name) is written as the revision",
           MODELS),
    mutant("planner/fetchrungs.py", "disk-ignores-planned",
           "ahead = sum(f.bytes for f in planned.values())", "ahead = 0",
           "§1.6: two fetches planned in one pass each fit the disk alone and fill it together",
           PLAN),
    mutant("planner/fetchrungs.py", "fetch-per-role",
           "planned[name] = Fetch(", "planned[d.decision.role] = Fetch(",
           "§1.6: two roles waiting for one Model start two fetches of it", PLAN),
    mutant("planner/fetchrungs.py", "shared-fetch-counted-twice",
           "    if name in planned:\n", "    if False:\n",
           "§1.6: a second role waiting for a Model already planned counts its bytes again "
           "and is refused no_disk", PLAN),
    mutant("planner/fetchrungs.py", "draft-model-not-fetched",
           "for name in (spec.model, spec.serve.draft_model):", "for name in (spec.model,):",
           "§1.6: a role starts before its draft Model (with a source) is in the cache", PLAN),
)

#: ``reconcile import`` (§1.7, issue 31): what a role serves and what may run together.
MUTANTS += (
    mutant("manifests/importdocs.py", "one-model-per-file-name",
           'return ("path", posixpath.normpath(need.path))', 'return ("path", model_name(need))',
           "§1.7: two projectors named mmproj-F16.gguf in two folders become one Model; the "
           "second role serves the first role's projector", "tests/manifests"),
)
MUTANTS += (
    mutant("manifests/swaprouting.py", "routing-groups-ignored",
           '        return settings.get("groups"), None', "        return None, None",
           "§1.7: groups under routing.router.settings are ignored: models a config lets run "
           "together exclude each other (one at a time), said nowhere", "tests/manifests"),
    mutant("manifests/swaprouting.py", "matrix-and-pairs-nothing",
           '        if kind == "and":\n            for i, (left, _)',
           '        if False:\n            for i, (left, _)',
           "§1.7: the matrix's combinations are dropped: every model excludes every other",
           "tests/manifests"),
    mutant("manifests/swaprouting.py", "three-way-unsaid",
           "if len(clique) > 2 and not any(clique <= c for c in combos):", "if False:",
           "§1.7: three models a matrix runs only in pairs are written to run all together, "
           "and counted whole", "tests/manifests"),
    mutant("manifests/swaprouting.py", "one-way-groups-unsaid",
           "            elif a_stops_b != b_stops_a:", "            elif False:",
           "§1.7: a pair llama-swap runs together in one start order is kept apart both ways, "
           "and counted whole", "tests/manifests"),
)
