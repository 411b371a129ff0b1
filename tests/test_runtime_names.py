"""One seam per runtime (STYLE.md): no module outside the registry asks *which* runtime it is.

Callers ask what a runtime can do (``spec_of(runtime).launched``, ``.shared_endpoint``,
``.loads_models`` …). Naming a ``Runtime`` member is for the runtime modules
themselves and the value-type modules that define and carry the enum.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reconciler.core.desired import Runtime

PACKAGE = Path(__file__).parents[1] / "reconciler"

#: Where naming ``Runtime.<MEMBER>`` is allowed (paths relative to the repository).
ALLOWED = ("reconciler/runtimes/", "reconciler/core/desired.py", "reconciler/core/observed.py",
           "reconciler/core/decisions.py")


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def members_named(source: str) -> list[tuple[int, str]]:
    """(line, ``Runtime.X``) for every ``Runtime.X`` / ``<module>.Runtime.X`` in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or node.attr not in Runtime.__members__:
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if name == "Runtime":
            found.append((node.lineno, f"Runtime.{node.attr}"))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "schemas" not in p.parts)


def test_the_detector_sees_both_spellings() -> None:
    """The walk finds ``Runtime.OLLAMA`` and ``desired.Runtime.MLX_LM``, not other attributes."""
    source = "a = Runtime.OLLAMA\nb = desired.Runtime.MLX_LM\nc = Other.OLLAMA\nd = Runtime.x\n"
    assert members_named(source) == [(1, "Runtime.OLLAMA"), (2, "Runtime.MLX_LM")]


@pytest.mark.parametrize("path", [p for p in MODULES if not _rel(p).startswith(ALLOWED)],
                         ids=_rel)
def test_no_runtime_member_outside_the_registry(path: Path) -> None:
    """Outside runtimes/ and the value types, code asks capabilities, never Runtime.X."""
    named = members_named(path.read_text())
    assert not named, f"{_rel(path)} names {named}: ask runtimes.spec_of(...) what it can do"
