"""Mutants of the planner's makers by position (issue 27 item 6): a value built fast is the value."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/positional.py", "twin-stores-the-wrong-field",
           'f"    self.{a.name} = {a.name}\\n" for a in given',
           'f"    self.{a.name} = {given[-1].name}\\n" for a in given',
           "§4: a decision or payload built by position holds its last field's value in every "
           "slot (its devices where its role and reason should be)", "tests/plan/test_payloads.py"),
    mutant("core/positional.py", "fallback-drops-a-field",
           "return lambda *values, **named: cls(**dict(zip(names, values)), **named)",
           "return lambda *values, **named: cls(**dict(zip(names[1:], values[1:])), **named)",
           "where the fast maker is refused, a decision built by position loses its role",
           "tests/plan/test_payloads.py"),
)
