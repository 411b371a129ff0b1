"""Mutants of the planner's makers by position (issue 27 item 6): a value built fast is the value."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/positional.py", "twin-fields-out-of-order",
           "names = [a.name for a in fields if a.init]",
           "names = sorted(a.name for a in fields if a.init)",
           "§4: a decision or payload built by position holds its fields in the wrong slots "
           "(a restart's count where its release should be)", "tests/plan/test_payloads.py"),
    mutant("core/positional.py", "fallback-drops-a-field",
           "return lambda *values: cls(**dict(zip(names, values)))",
           "return lambda *values: cls(**dict(zip(names[1:], values[1:])))",
           "where the fast maker is refused, a decision built by position loses its role",
           "tests/plan/test_payloads.py"),
)
