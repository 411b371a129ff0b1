"""The design shipped with the code stays in step with it.

* ``docs/architecture.md`` names every module of the package in its module
  table, with the kind (PURE or SHELL) its docstring declares.
* A module of a pure layer (``tests/test_import_direction.py``'s ``LAYERS``)
  says PURE, so the folder and the docstring agree; a module that says PURE
  in a shell layer is held to the pure rule by the import test.
* Every ``BEHAVIOUR §N`` the code cites is a section of ``docs/behaviour.md``.
* Each module is named in its own package's section of that table, and nowhere
  else as a row; the library-owner table is ``OWNERS`` of the import test, exactly;
  the figures and lists the page states about the code (the vocabulary's size,
  the test folders) are what the tree holds.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests.test_import_direction import OWNERS, PURE_LAYERS, _layer

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "reconciler"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BEHAVIOUR = ROOT / "docs" / "behaviour.md"

_ROW = re.compile(r"^\| `([\w/]+\.py)` \| (PURE|SHELL) \|", re.MULTILINE)
_SKIPPED = {"__init__.py", "__main__.py"}  # the package's own entry points


@functools.cache
def _modules() -> dict[str, str]:
    """Module path relative to the package → the kind its docstring declares."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if "schemas" in path.parts or (rel in _SKIPPED) or rel.startswith("commands/__init__"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        head = doc.split("\n\n")[0]
        kinds = {k for k in ("PURE", "SHELL") if k in head}
        if rel.endswith("__init__.py") and len(kinds) != 1:
            continue  # a package's docstring describes its modules, each listed on its own
        out[rel] = kinds.pop() if len(kinds) == 1 else "?"
    return out


def _table() -> dict[str, str]:
    return dict(_ROW.findall(ARCHITECTURE.read_text()))


def test_every_module_declares_its_kind():
    """Each module's docstring says, in its first paragraph, whether it is PURE or SHELL."""
    undeclared = sorted(m for m, kind in _modules().items() if kind == "?")
    assert not undeclared, f"docstrings without exactly one of PURE/SHELL: {undeclared}"


def test_architecture_names_every_module_with_its_kind():
    """docs/architecture.md's module table lists each module once, with its declared kind."""
    modules, table = _modules(), _table()
    missing = sorted(set(modules) - set(table))
    stale = sorted(set(table) - set(modules) - {"runtimes/__init__.py"})
    wrong = sorted(m for m in modules if m in table and modules[m] not in ("?", table[m]))
    assert not missing, f"modules missing from docs/architecture.md: {missing}"
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"
    assert not wrong, f"kind in docs/architecture.md disagrees with the docstring: {wrong}"


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _layer(f"reconciler/{m}") in PURE_LAYERS))
def test_a_module_of_a_pure_layer_says_pure(module):
    """The folder says pure, so the docstring does too: a reader of either learns the same."""
    assert _modules()[module] == "PURE", f"reconciler/{module} is in a pure layer but its docstring says otherwise"


def test_every_cited_behaviour_section_exists():
    """Each `BEHAVIOUR §N[.M]` cited in the code is a heading of docs/behaviour.md."""
    headings = set(re.findall(r"^#+ §(\d+(?:\.\d+)*)", BEHAVIOUR.read_text(), re.MULTILINE))
    cited = set()
    for path in PACKAGE.rglob("*.py"):
        for group in re.findall(r"BEHAVIOUR((?:[ ,;]+(?:and )?§\d+(?:\.\d+)*)+)", path.read_text()):
            cited.update(re.findall(r"§(\d+(?:\.\d+)*)", group))
    # §1.4 cited, §1 a heading: a subsection is found under its section's heading too.
    unknown = sorted(c for c in cited if c not in headings and c.split(".")[0] not in headings)
    assert cited, "no BEHAVIOUR citation found: the pattern is wrong"
    assert not unknown, f"cited but not in docs/behaviour.md: {unknown}"


#: A module longer than this says why in its docstring, in a paragraph opening "Size:".
LONG_MODULE = 300


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_a_long_module_says_why_it_is_long(path):
    """STYLE: modules stay ≲ 300 lines; one that is longer gives its reason ("Size: …")."""
    text = path.read_text()
    if len(text.splitlines()) <= LONG_MODULE:
        return
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert any(p.startswith("Size: ") for p in doc.split("\n\n")), (
        f"{path.relative_to(ROOT)} has {len(text.splitlines())} lines and no 'Size:' reason")


def _sections() -> dict[str, tuple[str, str]]:
    """Each module row of docs/architecture.md → (the ``## `` heading above it, the package
    section row above it: ``core/`` … ``commands/``, or "" before the first)."""
    heading, package, out = "", "", {}
    for line in ARCHITECTURE.read_text().splitlines():
        if line.startswith("## "):
            heading, package = line[3:].strip(), ""
        elif m := re.match(r"^\| \*\*`(\w+)/`\*\*", line):
            package = m.group(1)
        elif m := _ROW.match(line):
            assert m.group(1) not in out, f"{m.group(1)} has two rows in docs/architecture.md"
            out[m.group(1)] = (heading, package)
    return out


def test_each_module_is_named_in_its_own_package_section():
    """A module's row sits in the "Modules" table under its own package's section row
    (``cli.py``, above the commands, under ``commands/``): a row pasted into another table,
    or under another package, is where a reader looking for it would not find it."""
    misplaced = []
    for module, (heading, package) in sorted(_sections().items()):
        own = module.split("/")[0] if "/" in module else "commands"
        if heading != "Modules" or package != own:
            misplaced.append(f"{module} (under '{heading}' / {package or 'no package'}/, not {own}/)")
    assert not misplaced, f"module rows outside their package's section: {misplaced}"


def _owner_table() -> dict[str, set[str]]:
    """docs/architecture.md's library → owner table: library → its owner modules (none: empty)."""
    text = ARCHITECTURE.read_text()
    body = text[text.index("| library | its one owner |"):].split("\n\n")[0]
    out = {}
    for line in body.splitlines()[2:]:
        m = re.match(r"^\| `([\w.]+)` \| (.*) \|$", line)
        assert m, f"not a library row: {line!r}"
        out[m.group(1)] = {f"reconciler/{o}" for o in re.findall(r"^`([\w/]+\.py)`", m.group(2))}
    return out


def test_the_owner_table_is_the_import_tests_owners():
    """docs/architecture.md's library → owner table lists exactly the libraries of the import
    test's ``OWNERS``, each with the same owner (or none): no library missing, no module row."""
    assert _owner_table() == OWNERS


#: The vocabulary modules "Where to start reading" names, and how far its figure may drift.
VOCABULARY = ("core/decisions.py", "core/desired.py", "core/observed.py")


def test_the_vocabulary_size_the_page_states_is_the_trees():
    """The page's "vocabulary, in about N lines": N is within 15 % of what the three modules hold."""
    m = re.search(r"`core/observed\.py`: the vocabulary, in about (\d+) lines", ARCHITECTURE.read_text())
    assert m, "the vocabulary's line count is no longer stated as the test expects"
    lines = sum(len((PACKAGE / v).read_text().splitlines()) for v in VOCABULARY)
    assert abs(int(m.group(1)) - lines) <= lines * 0.15, f"the page says {m.group(1)}, the modules hold {lines}"


def test_every_test_folder_is_named_where_the_page_describes_the_tests():
    """The paragraph on how tests are grouped names each folder of tests/, and no other."""
    text = ARCHITECTURE.read_text()
    para = next(p for p in text.split("\n\n") if p.startswith("Tests are grouped by"))
    named = set(re.findall(r"`tests/(\w+)`", para))
    folders = {d.name for d in (ROOT / "tests").iterdir()
               if d.is_dir() and any(d.glob("*.py"))}
    assert named == folders, f"unnamed: {sorted(folders - named)}, named but absent: {sorted(named - folders)}"


#: STYLE: no module over this many lines unless it is one idea, said here and in its "Size:".
ONE_IDEA_LINES = 450

#: The modules allowed over ``ONE_IDEA_LINES``, each with why it is one idea. A module that
#: grows past the line is split where two ideas share it, or added here with its reason.
ONE_IDEA = {
    "core/desired.py": "the desired-state vocabulary: one small frozen class or enum per "
                       "manifest concept (25), read by the planner as one; instance names "
                       "and specs are core/instances.py",
}


def test_no_module_is_over_the_line_unless_it_is_one_idea():
    """A module over 450 lines is listed in ``ONE_IDEA`` with why it is one idea (STYLE: a
    long module is split where two ideas share it)."""
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    over = {m for m, n in sizes.items() if n > ONE_IDEA_LINES}
    assert over <= set(ONE_IDEA), {m: sizes[m] for m in sorted(over - set(ONE_IDEA))}
