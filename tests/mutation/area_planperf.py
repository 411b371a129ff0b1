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
    # rungs._STEADY: a kept draft handed out again only when every field is this pass's
    mutant("planner/rungs.py", "steady-ignores-detail",
           "d.status, d.detail, d.why,", "d.status, detail, d.why,",
           "§4 a kept role's status line shows the last pass's probe detail", "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-holds",
           "d.devices, was.holds,", "d.devices, holds,",
           "§7 a kept role holds the reservation of an earlier pass: a start that fits now is "
           "refused", "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-restarts",
           "d.retry_in, d.restarts,", "d.retry_in, restarts,",
           "§4 a kept role's restart count is an earlier pass's (a reset not recorded)",
           "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-release",
           "d.instance_id, d.release,", "d.instance_id, release,",
           "§7 a kept role releases what an earlier pass's record held", "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-status",
           "d.reason, d.status, d.detail,", "d.reason, status, d.detail,",
           "§1.2 an adopted role's status stays the last pass's probe's", "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-process",
           "return (d.act, d.reason,", "return (act, d.reason,",
           "§4 a role whose server was replaced keeps the old process as its own (a stop "
           "would target the old pid)", "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-address",
           "d.why, d.runtime, d.port, d.host,\n            d.instance_id,",
           "d.why, r.runtime, r.port, r.host,\n            r.instance_id,",
           "§2 a kept role moved to another port or host is reported at the old one",
           "tests/plan"),
    mutant("planner/rungs.py", "steady-ignores-devices",
           "d.restarts, d.devices, was.holds,\n            was.devices,",
           "d.restarts, devices, was.holds,\n            held,",
           "§7.1 a kept role holds the devices an earlier pass's record named", "tests/plan"),
)
