"""A llama-server flag table from a real binary's ``--help`` (§1.4): ``tools/flagtable.py BIN``.

Runs ``BIN --help`` and prints, one line per flag of that help, a table for
``reconciler/runtimes/llamacpp_tables.py``: a flag any supported build's table already has
(by any spelling) keeps that table's classification (newest first), with this help's
spellings; a flag no table has is printed as allowed text and marked ``# NEW: classify``
(a person decides whether the reconciler owns, refuses or allows it, §1.4).
``--diff b11434`` prints instead the spellings this help has that the b11434 table lacks
(``+``) and the other way round (``-``): what a build changed. Then add the build's table
with its number in ``TABLES`` and its line in ``tests/manifests/test_flag_tables.py``'s
both-ways test (which runs the real binary).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.runtimes.flags import Flag  # noqa: E402
from reconciler.runtimes.llamacpp_tables import TABLES  # noqa: E402
from tests.manifests.test_flag_tables import help_flags  # noqa: E402


def help_groups(text: str) -> list[dict[str, int]]:
    """Each flag line of llama-server's ``--help``: its spellings → arity, in order."""
    return [found for line in text.splitlines() if (found := help_flags(line, ""))]


def known(spellings: dict[str, int]) -> Flag | None:
    """The classification a supported build's table gives one of these spellings."""
    for build in sorted(TABLES, reverse=True):
        for spelling in spellings:
            found = TABLES[build].find(spelling)
            if found is not None:
                return found
    return None


def draft(text: str) -> list[str]:
    out = []
    for group in help_groups(text):
        names = " ".join(group)
        arity = max(group.values())
        found = known(group)
        if found is None:
            value = "T" if arity else "N"
            count = f", count={arity}" if arity > 1 else ""
            out.append(f'    flag("{names}", ValueType.{"TEXT" if arity else "NONE"}{count}),'
                       f"  # NEW: classify ({value})")
            continue
        parts = [f'"{names}"', f"ValueType.{found.value.name}"]
        if found.cls.name != "ALLOWED":
            parts += [f"FlagClass.{found.cls.name}", repr(found.instead)]
        if found.choices:
            parts.append(f"choices={found.choices!r}")
        if found.count != 1:
            parts.append(f"count={found.count}")
        out.append(f"    flag({', '.join(parts)}),")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="a llama-server (its --help is read)")
    parser.add_argument("--diff", metavar="BUILD", help="compare with this table (b11434)")
    args = parser.parse_args()
    done = subprocess.run([args.binary, "--help"], capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    if args.diff:
        table = TABLES[int(args.diff.lstrip("b"))]
        real = help_flags(text, "")
        for spelling in sorted(s for s in real if s not in table):
            print(f"+ {spelling}")
        for spelling in sorted(s for s in table if s not in real):
            print(f"- {spelling}")
        return 0
    print("\n".join(draft(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
