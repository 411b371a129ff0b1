"""Mutants of §14's version checks (after start) and §1.4's tables per version (progver).

Each breaks one rule of "the build that runs is the one pinned"; ``catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

VS, PV = "planner/versions.py", "world/pkgversion.py"
PROG = "tests/programs"
IM, IMT = "commands/importer.py", "tests/manifests/test_import_versions.py"
TB, TBT = "runtimes/llamacpp_tables.py", "tests/manifests/test_flag_tables_b5361.py"

MUTANTS = (
    # ---------------------------------------------------------------- mlx-lm's version
    mutant(VS, "unreadable-version-degrades",
           '    elif reported.strip() in ("", UNKNOWN):',
           "    elif False:",
           "§14: an mlx-lm server whose version could not be read is degraded as another "
           "version instead of said as not confirmed", PROG),
    mutant(PV, "mlx-unreadable-said-nothing",
           '    return attrs.evolve(facts, version=mlx_lm(process.pid) or "unknown")',
           "    return attrs.evolve(facts, version=mlx_lm(process.pid))",
           "§14: an mlx-lm server whose version cannot be read is silently taken as "
           "confirmed", PROG),
    mutant(PV, "mlx-stranger-read",
           "    if (facts.health is not Health.UP or process is None or not process.owned",
           "    if (facts.health is not Health.UP or process is None",
           "§14: the version of a process that is not our server is read and judged", PROG),
    mutant(PV, "mlx-site-misread",
           '                        return line[start:at + len(marker) - len("mlx/")]',
           "                        return line[start:at]",
           "§14: the running mlx-lm's version is never found: every pinned mlx role says "
           "not confirmed", PROG),
    mutant("world/observe.py", "mlx-version-never-read",
           "        if t.ctx.version and t.rt.version_of_process:  # §14 no version over HTTP",
           "        if False:",
           "§14: a pinned mlx-lm server's version is never read from its process: nothing "
           "checks the build it runs", "tests/observe"),
    mutant("world/observe.py", "unpinned-version-read",
           "        if t.ctx.version and t.rt.version_of_process:  # §14 no version over HTTP",
           "        if t.rt.version_of_process:",
           "§14: an unpinned mlx-lm server's process is read for a version nothing asks for "
           "(said not confirmed)", "tests/observe"),
    # ---------------------------------------------------------------- import per version
    mutant(IM, "import-ignores-program-version",
           "    return lambda runtime, spelling: flags_for(runtime, version).find(spelling)",
           "    return translate.flag_lookup",
           "§1.7: `import --program-version b10068` still rewrites --no-mmap as b11434 says "
           "it, and the written role is refused by the Program's own build", IMT),
    # ---------------------------------------------------------------- b5361's table
    mutant(TB, "b5361-table-dropped",
           "{11434: TABLE, 10068: _b10068(), 5361: B5361}",
           "{11434: TABLE, 10068: _b10068()}",
           "§1.4: a Program of b5361 (or b5142) is judged by b10068's table: --draft-max "
           "and --draft-min, its own flags, are refused", TBT),
)
