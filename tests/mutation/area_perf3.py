"""Mutants of the planner's makers by position (issue 27 item 6): a value built fast is the value."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/positional.py", "twin-fields-out-of-order",
           "given = [a for a in fields if a.init]",
           "given = sorted((a for a in fields if a.init), key=lambda a: a.name)",
           "§4: a decision or payload built by position holds its fields in the wrong slots "
           "(a restart's count where its release should be)", "tests/plan/test_payloads.py"),
    mutant("core/positional.py", "fallback-drops-a-field",
           "return lambda *values, **named: cls(**dict(zip(names, values)), **named)",
           "return lambda *values, **named: cls(**dict(zip(names[1:], values[1:])), **named)",
           "where the fast maker is refused, a decision built by position loses its role",
           "tests/plan/test_payloads.py"),
)
