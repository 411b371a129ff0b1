"""Mutants of §1.4 per version (issue 29 item 6): which build's flag table judges a role.

Each breaks one rule of "a role's extra_args are judged by its Program's build";
``catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

TB, EA, GN = "runtimes/llamacpp_tables.py", "manifests/extra_args.py", "planner/generations.py"
TESTS = ("tests/manifests/test_extra_args.py", "tests/programs/test_program_flags.py")

MUTANTS = (
    mutant(TB, "table-of-the-wrong-version",
           "    return DEFAULT if version is None else TABLES[nearest(version)]",
           "    return DEFAULT",
           "§1.4: a role on a b10068 Program is judged by b11434's table: its --no-mmap, "
           "valid for the build it runs, is refused", *TESTS),
    mutant(TB, "nearest-older-chooses-newer",
           "    older = [b for b in TABLES if b <= n]\n    return max(older) if older else min(TABLES)",
           "    newer = [b for b in TABLES if b >= n]\n    return min(newer) if newer else max(TABLES)",
           "§1.4: a b10500 Program is judged by b11434's table (a newer build's flags it "
           "does not have are accepted)", *TESTS),
    mutant(EA, "refusal-without-the-version",
           '        base = f"{entry[:80]!r} is not a flag of {table.program} {table.version}"',
           '        base = f"{entry[:80]!r} is not a {runtime} flag"',
           "§1.4: a refusal does not say which build's table refused the flag", *TESTS),
    mutant(GN, "restart-words-without-the-program",
           "        if program is not None and before is not None and before != program:",
           "        if False:",
           "§14: a switch of Program restarts as `launch environment changed` (or two paths), "
           "not `program b11434 → b11500`", "tests/programs/test_program_restart_words.py"),
    mutant("commands/status.py", "status-table-without-the-program",
           """    return f"{program['name']}@{program['version']}" if program else "-\"""",
           """    return "-\"""",
           "§14: the status table does not say which Program a role runs",
           "tests/statuspage/test_status_cmd.py"),
)
