"""Mutants of §12 (Programs): the digest check, the stamp check and the version match.

Each breaks one rule of "every byte that runs is named in git"; ``catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

PS, ID, RG = "models/programstore.py", "planner/identity.py", "planner/rungs.py"
PROG = "tests/programs"

MUTANTS = (
    # ---------------------------------------------------------------- checked at every start
    mutant(PS, "digest-unchecked", "        if digest != f.sha256:",
           "        if False:",
           "§12: a Program file with a byte appended is started from", PROG),
    mutant(PS, "stamp-trusted-by-size", "        if prev is not None and prev.same_file(st):",
           "        if prev is not None and prev.size == st.st_size:",
           "§12: a file rewritten in place (same size) passes on its old digest", PROG),
    mutant(PS, "stamp-never-trusted", "        if prev is not None and prev.same_file(st):",
           "        if False:",
           "§12: every start rehashes every file (the check when nothing changed is no "
           "longer a stat per file)", PROG),
    mutant(PS, "outside-root-allowed",
           "if not is_safe_relpath(f.path) or os.path.commonpath([real, real_root]) != real_root:",
           "if not is_safe_relpath(f.path):",
           "§12: a file linked out of the Program's root is hashed and run", PROG),
    mutant(RG, "program-refusal-ignored",
           "        if program is not None and name == program_key(program.name):  # §12",
           "        if False:",
           "§12: the planner starts a role whose Program changed (the executor alone refuses, "
           "pass after pass, each a failed start)", PROG),
    # ---------------------------------------------------------------- a new generation
    mutant(ID, "program-not-in-launch",
           "        return env if program is None else (*env, (PROGRAM_ENV, program.label))",
           "        return env",
           "§12: a new Program at the same path restarts nothing", PROG),
)
