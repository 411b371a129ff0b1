"""The longest functions of the package and the deepest nesting, by its AST (a report).

``python tools/functions.py [DIR] [-n N]``: the N longest functions (lines from
``def`` to the end of its body, decorators and docstring included) with the
depth of their deepest nested block (if/for/while/with/try/match; nested
functions and classes count on their own), then the N most deeply nested.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def depth(node: ast.AST, level: int = 0) -> int:
    """The deepest block nesting inside ``node``, not counting nested defs or classes."""
    best = level
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (*DEFS, ast.Lambda, ast.ClassDef)):
            continue
        best = max(best, depth(child, level + isinstance(child, BLOCKS)))
    return best


def functions(root: Path) -> list[tuple[int, int, str]]:
    """``(lines, depth, "path:line name")`` of every function under ``root``."""
    rows = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, DEFS):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                rows.append((node.end_lineno - start + 1, depth(node),
                             f"{path}:{node.lineno} {node.name}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default="reconciler")
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    rows = functions(Path(args.root))
    print("longest:")
    for lines, deep, where in sorted(rows, key=lambda r: (-r[0], r[2]))[:args.n]:
        print(f"  {lines:4d} lines  depth {deep}  {where}")
    print("deepest:")
    for lines, deep, where in sorted(rows, key=lambda r: (-r[1], -r[0], r[2]))[:args.n]:
        print(f"  depth {deep}  {lines:4d} lines  {where}")


if __name__ == "__main__":
    main()
