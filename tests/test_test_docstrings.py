"""Every test says the rule it pins: a test function without a docstring fails here.

STYLE: a test's docstring names the rule it pins (the § of docs/behaviour.md where there is
one), so a failure reads as the rule broken. The walk covers what pytest collects from
``tests/``: module-level ``test*`` functions and the ``test*`` methods of ``Test*`` classes
(a helper nested inside a test is not a test).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _tests(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and f.name.startswith("test"))


def test_every_test_has_a_docstring_naming_its_rule() -> None:
    """Each collected test function has a docstring of at least a few words (the rule it pins)."""
    found, bare = 0, []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in _tests(ast.parse(path.read_text(), filename=str(path))):
            found += 1
            doc = ast.get_docstring(node) or ""
            if len(doc.split()) < 4:
                bare.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}: {node.name}")
    assert found > 1000, f"only {found} tests found: the walk is wrong"
    assert not bare, f"{len(bare)} tests without a docstring saying their rule:\n" + "\n".join(bare)
