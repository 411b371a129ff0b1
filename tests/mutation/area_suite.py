"""Mutants the suite helper added: rules whose breaking no fast test noticed before."""

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/outcomes.py", "found-while-acting-needs-no-operator",
           "return bool(self.exposed) or (", "return False and (",
           "§4/§5: a server found exposed after its start, or a model that fails verification at "
           "spawn, exits 0 or 1 instead of 3 (nobody is told the role is held stopped-exposed)",
           "tests/execute/test_outcome_operator.py"),
)
