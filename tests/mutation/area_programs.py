"""Mutants of §14 (Programs): the digest check, the stamp check and the version match.

Each breaks one rule of "every byte that runs is named in git"; ``catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

PS, ID, RG = "models/programstore.py", "planner/identity.py", "planner/rungs.py"
VS, LD = "planner/versions.py", "planner/stages/ladder.py"
PROG = "tests/programs"

MUTANTS = (
    # ---------------------------------------------------------------- checked at every start
    mutant(PS, "digest-unchecked", "        if digest != f.sha256:",
           "        if False:",
           "§14: a Program file with a byte appended is started from", PROG),
    mutant(PS, "stamp-trusted-by-size", "        if prev is not None and prev.same_file(st):",
           "        if prev is not None and prev.size == st.st_size:",
           "§14: a file rewritten in place (same size) passes on its old digest", PROG),
    mutant(PS, "stamp-never-trusted", "        if prev is not None and prev.same_file(st):",
           "        if False:",
           "§14: every start rehashes every file (the check when nothing changed is no "
           "longer a stat per file)", PROG),
    mutant(PS, "outside-root-allowed",
           "if not is_safe_relpath(f.path) or os.path.commonpath([real, real_root]) != real_root:",
           "if not is_safe_relpath(f.path):",
           "§14: a file linked out of the Program's root is hashed and run", PROG),
    mutant(RG, "program-refusal-ignored",
           "        if program is not None and name == program_key(program.name):  # §14",
           "        if False:",
           "§14: the planner starts a role whose Program changed (the executor alone refuses, "
           "pass after pass, each a failed start)", PROG),
    # ---------------------------------------------------------------- the version match
    mutant(VS, "another-build-passes",
           "        if int(mine[1]) == int(theirs[1]):",
           "        if True:",
           "§14: a server running b11500 for a Program pinned at b11434 reads as in sync", PROG),
    mutant(VS, "build-zero-degrades", "        if theirs is None or int(theirs[1]) <= 1:",
           "        if theirs is None:",
           "§14: the testbed's build 0 (no number) degrades every role instead of being "
           "said once as not confirmed", PROG),
    mutant(LD, "mismatch-not-degraded", "        if said is not None and said[0]:",
           "        if False:",
           "§14: another build than the Program's runs and the role reads running", PROG),
    # ---------------------------------------------------------------- a new generation
    mutant(ID, "program-not-in-launch",
           "        return env if program is None else (*env, (PROGRAM_ENV, program.label))",
           "        return env",
           "§14: a new Program at the same path restarts nothing", PROG),
)
