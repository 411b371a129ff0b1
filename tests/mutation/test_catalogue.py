"""The mutation sample stays applicable: each mutant still finds the code it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutation.catalogue import MUTANTS

REPO = Path(__file__).resolve().parents[2]


def test_names_are_unique_and_the_sample_is_broad() -> None:
    """At least 80 mutants, every module of the pure core sampled (labels, fleetdiff,
    exitreasons and demand too: an independent sample found them never mutated; the
    planner's stages), no name twice."""
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) and len(names) >= 80
    modules = {m.name.split("/")[0] for m in MUTANTS}
    assert {"plan", "ladder", "views", "policy", "records", "decisions", "render", "extra_args", "crosscheck",
            "runtimes", "labels", "fleetdiff", "exitreasons", "demand"} <= modules


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_applies_once_and_compiles(mutant) -> None:
    """The original text occurs exactly once, and the mutated module still compiles (a
    mutant of the status page's script, ``page.js``, is not Python: it is only applied)."""
    source = (REPO / mutant.path).read_text()
    assert source.count(mutant.old) == 1, f"{mutant.path}: the code this mutant breaks moved"
    assert mutant.old != mutant.new
    if mutant.path.endswith(".py"):
        compile(source.replace(mutant.old, mutant.new), mutant.path, "exec")
