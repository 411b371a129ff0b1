"""One hand-made mutant of the code: what it replaces, the rule it breaks, the tests run first."""

from __future__ import annotations

from typing import NamedTuple


class Mutant(NamedTuple):
    name: str
    path: str  # relative to the repository root
    old: str  # found exactly once in ``path``
    new: str
    breaks: str  # the rule broken, as an operator would notice it
    tests: tuple[str, ...]  # the test paths run first


def mutant(path: str, name: str, old: str, new: str, breaks: str, *tests: str) -> Mutant:
    """A mutant of ``reconciler/<path>`` named ``<area>/<name>``; ``tests`` are run first."""
    area = path.rsplit("/", 1)[-1].removesuffix(".py")
    return Mutant(f"{area}/{name}", f"reconciler/{path}", old, new, breaks, tuple(tests))
