"""A llama-server flag table from a real binary's ``--help`` (§1.4): ``tools/flagtable.py BIN``.

Runs ``BIN --help`` and prints, one line per flag of that help, a table for
``reconciler/runtimes/llamacpp_tables.py``: a flag any supported build's table already has
(by any spelling) keeps that table's classification (newest first), with this help's
spellings; a flag no table has is printed as allowed text and marked ``# NEW: classify``
(a person decides whether the reconciler owns, refuses or allows it, §1.4); one whose
number of values moved (``-fa``, a switch in b5361) is marked ``# CHANGED``.
``--diff b11434`` prints instead the spellings this help has that the b11434 table lacks
(``+``) and the other way round (``-``): what a build changed. Then add the build's table
with its number in ``TABLES`` and its line in ``tests/manifests/test_flag_tables.py``'s
both-ways test (which runs the real binary). ``--check-capture FILE`` compares this help's
spellings and their numbers of values with a stored capture's (exit 1 and each difference
when they differ): how a capture kept for a build ``make testbed`` does not compile
(``tests/manifests/corpus/help/llama-server-b5361.txt``) is checked against that binary.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.runtimes.flags import Flag  # noqa: E402
from reconciler.runtimes.llamacpp_flags import REMOVED  # noqa: E402
from reconciler.runtimes.llamacpp_tables import TABLES  # noqa: E402
from tests.manifests.test_flag_tables import help_flags  # noqa: E402


def help_groups(text: str) -> list[tuple[dict[str, int], str]]:
    """Each flag line of llama-server's ``--help``: its spellings → arity, and the line."""
    return [(found, line) for line in text.splitlines() if (found := help_flags(line, ""))]


def known(spellings: dict[str, int], stub: bool = True) -> Flag | None:
    """The classification a supported build's table gives one of these spellings. Where
    this help takes the flag for real (``stub`` False: its line does not say "has been
    removed"), a build's "removed" stub (``--draft-max`` in b11434) classifies nothing:
    an older build that still takes it is a person's to classify."""
    for build in sorted(TABLES, reverse=True):
        for spelling in spellings:
            found = TABLES[build].find(spelling)
            if found is not None and (stub or not found.instead.startswith(REMOVED)):
                return found
    return None


def draft(text: str) -> list[str]:
    out = []
    for group, line in help_groups(text):
        names = " ".join(group)
        arity = max(group.values())
        found = known(group, stub="has been removed" in line)
        if found is None:
            value = "T" if arity else "N"
            count = f", count={arity}" if arity > 1 else ""
            out.append(f'    flag("{names}", ValueType.{"TEXT" if arity else "NONE"}{count}),'
                       f"  # NEW: classify ({value})")
            continue
        # A flag whose number of values moved (`-fa` once a switch): this help's arity.
        moved = found.arity != arity
        value = ("NONE" if arity == 0 else found.value.name if found.arity else "TEXT"
                 ) if moved else found.value.name
        parts = [f'"{names}"', f"ValueType.{value}"]
        if found.cls.name != "ALLOWED":
            parts += [f"FlagClass.{found.cls.name}", repr(found.instead)]
        if found.choices and not moved:
            parts.append(f"choices={found.choices!r}")
        if (arity if moved else found.count) > 1:
            parts.append(f"count={arity if moved else found.count}")
        note = f"  # CHANGED: {arity} values here: classify" if moved else ""
        out.append(f"    flag({', '.join(parts)}),{note}")
    return out


def check_capture(real: dict[str, int], stored: dict[str, int]) -> int:
    """Print each spelling the binary's help and the capture disagree on; 0 when none."""
    differ = sorted(s for s in real.keys() | stored.keys() if real.get(s) != stored.get(s))
    for spelling in differ:
        print(f"{spelling}: the binary says {real.get(spelling, 'absent')}, "
              f"the capture {stored.get(spelling, 'absent')}")
    if not real:
        print("the binary's --help lists no flag")
    print("the capture is the binary's help" if not differ and real else
          f"{len(differ)} spelling(s) differ")
    return 0 if real and not differ else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="a llama-server (its --help is read)")
    parser.add_argument("--diff", metavar="BUILD", help="compare with this table (b11434)")
    parser.add_argument("--check-capture", metavar="FILE", type=Path,
                        help="compare with a stored --help of this build")
    args = parser.parse_args()
    done = subprocess.run([args.binary, "--help"], capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    if args.check_capture:
        return check_capture(help_flags(text, ""),
                             help_flags(args.check_capture.read_text(), ""))
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
