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
    mutant("world/postmortem.py", "dry-pass-says-unknown",
           "            else ExitInfo(pending=not records))", "            else ExitInfo())",
           "§4: `status` says a server watch started is `not a child` before watch records it",
           "tests/exitreasons"),
    mutant("planner/exitreasons.py", "pending-worded-unknown",
           "    if info.pending:\n", "    if False:\n",
           "§4: `status` says `exit status unknown` where the parent has not recorded it yet",
           "tests/exitreasons"),
    mutant("world/execute.py", "restart-not-drained",
           "        if d.reason is Reason.SPEC_CHANGED:\n", "        if False:\n",
           "§9/§12: a rolling update cuts the requests in flight on each restarted instance",
           "tests/execute"),
)
