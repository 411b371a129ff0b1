"""Mutants of the planner's stages and of decisions by verb (issue 27): each names the rule it breaks."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/decisions.py", "flat-field-dropped",
           "stray = sorted(k for k, v in fields.items() if k not in carried and v not in (None, 0))",
           "stray = []",
           "a decision with a field its verb does not carry (a keep's launch) is built silently",
           "tests/plan/test_payloads.py"),
    mutant("core/decisions.py", "stop-without-target",
           '            raise TypeError("a stop decision needs the pid it targets")',
           "            pass",
           "§4: a stop that names no process can be built", "tests/plan/test_payloads.py"),
    mutant("planner/stages/deviceuse.py", "device-use-ignored",
           "decisions=tuple(placement.over_reserved(d, uses) for d in p.decisions)",
           "decisions=p.decisions",
           "§7.1: a server over its reservation on a device is not degraded",
           "tests/devices", "tests/plan"),
    mutant("planner/stages/orphans.py", "orphans-dropped",
           "return attrs.evolve(d, drafts=d.drafts + tuple(extra))", "return d",
           "§4: a server of ours that no role wants is left running", "tests/plan"),
    mutant("planner/rungs.py", "restart-forgets-its-process",
           "r.launch(), r.process, need,", "r.launch(), None, need,",
           "§4: a restart spawns beside the running server instead of stopping it first",
           "tests/plan", "tests/records"),
)
