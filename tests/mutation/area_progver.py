"""Mutants of §14's version checks (after start) and §1.4's tables per version (progver).

Each breaks one rule of "the build that runs is the one pinned"; ``catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

VS, PV = "planner/versions.py", "world/pkgversion.py"
PROG = "tests/programs"

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
)
