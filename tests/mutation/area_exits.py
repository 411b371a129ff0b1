"""Mutants of how our own children's exit statuses are kept (``system/programs.py``, §4)."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("system/programs.py", "noted-create-time-ignored",
           "    if noted is not None:\n        return same_start(noted, create_time)\n",
           "    if False:\n        return same_start(noted, create_time)\n",
           "§4: a server we started reads `exit status unknown: not a child` after a clock step",
           "tests/exitreasons"),
    mutant("system/programs.py", "any-create-time-gets-the-status",
           "    if create_time is not None and not _is_that_start(create_time, start):",
           "    if False:",
           "§4: a process that once held our child's pid is given our child's exit code",
           "tests/exitreasons"),
)
