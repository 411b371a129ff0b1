"""The dependency direction of STYLE.md, enforced by parsing every module's imports.

* The package is cut into layers (``LAYERS``, lowest first): no module imports
  a module of a later layer, and the package has no import cycle (imports inside
  functions and through a package's ``__init__.py`` count).
* Pure layers (the functional core), and modules of a shell layer whose
  docstring opens with PURE, import no IO library and no shell module.
* Each IO client library is imported by exactly one module, one of its listed
  owners. Edit ``LAYERS`` when a package is added, ``OWNERS`` when a library is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "reconciler"

#: The layers of the package, lowest first (docs/architecture.md draws them). A module may
#: import modules of its own package and of the packages before its own, never of one after
#: it. A pure layer imports no IO; in a shell layer, a module whose docstring opens with PURE
#: is held to the pure rule too (the module says so once, the test enforces it).
LAYERS: tuple[tuple[str, bool], ...] = (
    ("core", True),        # values, units, errors, exit codes, labels, addresses
    ("runtimes", True),    # one declaration per runtime: argv, flags, probes, answers
    ("manifests", True),   # YAML → validated desired state, or every problem
    ("planner", True),     # plan() and its rungs, the ledger, policy, records, render
    ("fleet", True),       # every node's offline plan, what a revision changes
    ("system", False),     # subprocess, signals, failpoints: the OS's primitives
    ("platform", False),   # the OS's process facts behind one seam: linux, portable (psutil)
    ("models", False),     # model files: hashing, stamps, verification, checks
    ("state", False),      # state.db and the lock
    ("repo", False),       # the manifests checkout: files, git commit, revisions
    ("world", False),      # observing and acting on servers and processes
    ("engine", False),     # one pass, room by room
    ("report", False),     # log lines and metrics
    ("router", False),     # the OpenAI-compatible endpoint (§9)
    ("daemon", False),     # `watch`: wake-ups and the pass policy
    ("commands", False),   # one module per command
    ("cli", False),        # argparse and dispatch (cli.py, __main__.py)
)
LAYER_INDEX = {name: i for i, (name, _) in enumerate(LAYERS)}
PURE_LAYERS = {name for name, pure in LAYERS if pure}

#: What a pure module may not import (top-level names).
FORBIDDEN_IN_PURE = {
    "os", "subprocess", "socket", "time", "random", "threading", "asyncio", "sqlite3",
    "httpx", "psutil", "watchfiles", "signal", "shutil", "pathlib", "tempfile", "select",
    "selectors", "multiprocessing", "fcntl", "io", "urllib", "http", "ssl", "pty",
}

#: IO library → the modules allowed to import it; at most one of them may.
OWNERS: dict[str, set[str]] = {
    "aiohttp": {"reconciler/router/proxy.py"},  # the router's server and upstream client (§9)
    "jinja2": {"reconciler/report/page.py"},  # the status page's templates (§11)
    "httpx": set(),  # probes are an asyncio protocol + http11.py (probe.py says why)
    "http": {"reconciler/models/fetch.py"},
    "ipaddress": {"reconciler/core/loopback.py"},  # the one loopback rule (§5), addresses  # Model downloads (§1.6; fetch.py says why)
    "ssl": {"reconciler/models/fetch.py"},
    "prometheus_client": {"reconciler/report/metrics.py"},  # exposition, /metrics, the file
    "psutil": {"reconciler/platform/portable.py"},  # linux.py builds on its process table
    "pynvml": {"reconciler/world/devices.py"},  # NVML (nvidia-ml-py, optional), imported lazily
    "signal": {"reconciler/system/signals.py"},  # sending and catching signals
    "sqlite3": {"reconciler/state/store.py"},
    "tqdm": {"reconciler/commands/modelfetch.py"},  # `reconcile models fetch`'s bar
    "subprocess": {"reconciler/system/programs.py"},  # servers, git, version probes
    "watchfiles": {"reconciler/daemon/filewatch.py"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "schemas" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _layer(rel: str) -> str:
    """The layer of a module: its package under reconciler/, or "cli" for the top level."""
    parts = rel.split("/")
    return parts[1] if len(parts) > 2 else "cli"


def _says_pure(rel: str) -> bool:
    doc = ast.get_docstring(ast.parse((PACKAGE.parent / rel).read_text())) or ""
    return "PURE" in doc.split("\n\n")[0]


def _is_pure(rel: str) -> bool:
    return _layer(rel) in PURE_LAYERS or _says_pure(rel)


def _dotted(rel: str) -> str:
    name = rel.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Fully qualified names of every module imported anywhere in the file."""
    rel = _rel(path)
    package = _dotted(rel) if path.name == "__init__.py" else _dotted(rel).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # `from reconciler import manifests` imports a module, not a name
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _package_module(name: str) -> str | None:
    """The repository path of a reconciler module name, if it is one."""
    if not name.startswith("reconciler"):
        return None
    base = PACKAGE.parent / Path(*name.split("."))
    if base.with_suffix(".py").is_file():
        return _rel(base.with_suffix(".py"))
    if (base / "__init__.py").is_file():
        return _rel(base / "__init__.py")
    return None


MODULES = _modules()


def test_the_walk_finds_the_package() -> None:
    """The test sees the package's modules (guards against a vacuous pass)."""
    names = {_rel(p) for p in MODULES}
    assert {"reconciler/core/desired.py", "reconciler/manifests/loader.py", "reconciler/cli.py"} <= names


def test_every_package_has_a_layer() -> None:
    """reconciler/ holds only layered packages plus cli.py, __main__.py and __init__.py."""
    top = {p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__"))}
    packages = {name for name in top if (PACKAGE / name / "__init__.py").is_file()}
    assert packages == set(LAYER_INDEX) - {"cli"}, "a package without a layer, or a layer without a package"
    assert top - packages == {"__init__.py", "__main__.py", "cli.py"}, sorted(top - packages)


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    """Imports run down the layers: a module never imports one of a later package."""
    rel = _rel(path)
    mine = LAYER_INDEX[_layer(rel)]
    above = sorted(
        f"{name} ({_layer(target)})" for name in _imports(path)
        if (target := _package_module(name)) is not None and target != "reconciler/__init__.py"
        and LAYER_INDEX[_layer(target)] > mine)
    assert not above, f"{rel} ({_layer(rel)}) imports from a layer above it: {above}"


def _edges(path: Path) -> set[str]:
    """The package modules ``path`` runs by importing, anywhere in the file (a function's
    imports too). ``from reconciler.runtimes import spec_of`` runs the package's
    ``__init__.py``; ``from reconciler.runtimes import openai`` runs the submodule ``openai``
    (its package is already being imported, whoever asks: that alone is no cycle)."""
    rel = _rel(path)
    package = _dotted(rel) if path.name == "__init__.py" else _dotted(rel).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(t for alias in node.names if (t := _package_module(alias.name)))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                module = ".".join(base[: len(base) - (node.level - 1)] + ([module] if module else []))
            for alias in node.names:
                sub = _package_module(f"{module}.{alias.name}")
                target = sub if sub is not None else _package_module(module)
                if target is not None:
                    found.add(target)
    found.discard(rel)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module → the modules it imports), or None."""
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> list[str] | None:
        if node in trail:
            return trail[trail.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            if (found := visit(nxt, trail + [node])) is not None:
                return found
        done.add(node)
        return None

    for module in sorted(graph):
        if (found := visit(module, [])) is not None:
            return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    """No module reaches itself through its imports: module-level and function-local alike,
    through a package's ``__init__.py`` too (a registry that imports its members, and a
    member that asks the registry back, is a cycle however late the member asks)."""
    graph = {_rel(p): _edges(p) for p in MODULES}
    found = _cycle(graph)
    assert found is None, f"import cycle: {' → '.join(found)}"


def test_the_cycle_check_sees_a_function_level_import_through_init() -> None:
    """The check itself: runtimes/flags.py asking the registry (runtimes/__init__.py) from
    inside a function, as it once did, is the cycle registry → llamacpp → flags → registry."""
    graph = {_rel(p): _edges(p) for p in MODULES}
    assert "reconciler/runtimes/flags.py" in graph["reconciler/runtimes/llamacpp.py"]
    assert "reconciler/runtimes/llamacpp.py" in graph["reconciler/runtimes/__init__.py"]
    graph["reconciler/runtimes/flags.py"] = graph["reconciler/runtimes/flags.py"] | {
        "reconciler/runtimes/__init__.py"}
    assert _cycle(graph) is not None


@pytest.mark.parametrize("path", [p for p in MODULES if _is_pure(_rel(p))], ids=_rel)
def test_pure_module_imports_no_io(path: Path) -> None:
    """A pure module imports no IO library and no shell module of the package."""
    bad = set()
    for name in _imports(path):
        if name.split(".")[0] in FORBIDDEN_IN_PURE:
            bad.add(name)
        target = _package_module(name)
        if target is not None and not _is_pure(target) and not target.endswith("__init__.py"):
            bad.add(f"{name} (shell module {target})")
    assert not bad, f"{_rel(path)} is pure but imports {sorted(bad)}"


@pytest.mark.parametrize("library", sorted(OWNERS))
def test_io_library_has_one_owner(library: str) -> None:
    """Each IO client library is imported by at most one module, which is a listed owner."""
    importers = {_rel(p) for p in MODULES
                 if any(n.split(".")[0] == library for n in _imports(p))}
    assert importers <= OWNERS[library], f"{library} imported by unlisted {importers - OWNERS[library]}"
    assert len(importers) <= 1, f"{library} imported by several modules: {sorted(importers)}"


@pytest.mark.parametrize("library", sorted(lib for lib, owners in OWNERS.items() if owners))
def test_an_owner_says_it_owns_its_library(library: str) -> None:
    """The owner module's docstring names the library it alone imports (readers look there first)."""
    (owner,) = OWNERS[library]
    doc = ast.get_docstring(ast.parse((PACKAGE.parent / owner).read_text())) or ""
    assert re.search(rf"(only|one)\s+module\s+that\s+imports\s+(``)?{library}\b", doc), (
        f"{owner}'s docstring does not say it is the one module that imports {library}")


def test_package_init_modules_are_pure() -> None:
    """Package __init__ modules import nothing forbidden (importing a package runs them)."""
    for path in MODULES:
        if path.name == "__init__.py" and _rel(path) != "reconciler/commands/__init__.py":
            assert not {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN_IN_PURE}, path
