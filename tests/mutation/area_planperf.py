"""Mutants of the planner's fast paths (issue 27 item 6): a shortcut that skips work must
skip only work that finds nothing; each mutant widens one shortcut past that."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("planner/ledger.py", "conflicts-shortcut-one-way",
           "if not mine and name not in self._excluders and name not in self._together:",
           "if not mine:",
           "§7: a claim is placed beside a holder whose manifest excludes it (the exclusion "
           "read one way only)", "tests/plan"),
)
