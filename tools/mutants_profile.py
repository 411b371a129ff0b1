"""A pytest plugin for the mutation run: Hypothesis profile ``mutants`` (test helper).

The default profile's 50 examples, but derandomised and without the example
database, so that every mutant meets the same examples and no mutant's
counterexample is replayed against the next one. ``tools/mutants.py`` loads it
with ``-p mutants_profile`` before the suite's conftest picks the profile.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "mutants", max_examples=50, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
