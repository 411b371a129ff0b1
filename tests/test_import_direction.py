"""The dependency direction of STYLE.md, enforced by parsing every module's imports.

* Pure modules (the functional core) import no IO library and no shell module.
* Each IO client library is imported by exactly one module, one of its listed
  owners. Edit the tables below when a module is renamed or a new one is added.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "reconciler"

#: Pure modules and packages (paths relative to the repository, "/*" = every module inside).
PURE = {
    "reconciler/desired.py", "reconciler/observed.py", "reconciler/decisions.py",
    "reconciler/manifests.py", "reconciler/plan.py", "reconciler/records.py",
    "reconciler/rungs.py",  # the parts every rung of the ladder is built from
    "reconciler/loadrungs.py",  # the ladder's rungs for models loaded on a shared server
    "reconciler/generations.py", "reconciler/orphans.py",
    "reconciler/policy.py", "reconciler/ledger.py", "reconciler/render.py", "reconciler/units.py",
    "reconciler/identity.py", "reconciler/extra_args.py", "reconciler/errors.py",
    "reconciler/exitcodes.py",
    "reconciler/exitreasons.py",  # why a server exited, in words (§4)
    "reconciler/liveness.py",  # §4.1 liveness counters
    "reconciler/livenessrungs.py",  # §4.1 the ladder's liveness rungs
    "reconciler/events.py", "reconciler/outcomes.py",  # the vocabulary of a pass's results
    "reconciler/http11.py",  # sans-IO HTTP/1.1 framing
    "reconciler/runtimes/*",
    # the manifest loader's helpers
    "reconciler/yamlsafe.py", "reconciler/schemacheck.py", "reconciler/documents.py",
    "reconciler/crosscheck.py", "reconciler/schemata.py", "reconciler/modeldoc.py",
    # the fleet: labels, placement, every node's checks
    "reconciler/labels.py", "reconciler/fleet.py", "reconciler/nodecheck.py",
    "reconciler/offline.py", "reconciler/fleetview.py", "reconciler/fleetdiff.py",
    "reconciler/storeschema.py",  # the SQL text of state.db's schema steps
    # §9 on-demand roles: demand as a planner input, eviction
    "reconciler/demand.py", "reconciler/eviction.py", "reconciler/demandrungs.py",
    "reconciler/router/rules.py",  # the router's decisions: routes, headers, bodies, errors
}

#: What a pure module may not import (top-level names).
FORBIDDEN_IN_PURE = {
    "os", "subprocess", "socket", "time", "random", "threading", "asyncio", "sqlite3",
    "httpx", "psutil", "watchfiles", "signal", "shutil", "pathlib", "tempfile", "select",
    "selectors", "multiprocessing", "fcntl", "io", "urllib", "http", "ssl", "pty",
}

#: IO library → the modules allowed to import it; at most one of them may.
OWNERS: dict[str, set[str]] = {
    "aiohttp": {"reconciler/router/proxy.py"},  # the router's server and upstream client (§9)
    "httpx": set(),  # probes are an asyncio protocol + http11.py (probe.py says why)
    "prometheus_client": {"reconciler/metrics.py"},  # exposition, /metrics, the file
    "psutil": {"reconciler/procs.py"},
    "signal": {"reconciler/signals.py"},  # sending and catching signals
    "sqlite3": {"reconciler/store.py"},
    "subprocess": {"reconciler/programs.py"},  # servers, git, version probes
    "watchfiles": {"reconciler/filewatch.py"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "schemas" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _is_pure(rel: str) -> bool:
    return rel in PURE or any(
        p.endswith("/*") and rel.startswith(p[:-1]) for p in PURE)


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
    assert {"reconciler/desired.py", "reconciler/manifests.py", "reconciler/cli.py"} <= names


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
    assert re.search(rf"(only|one) module that imports (``)?{library}\b", doc), (
        f"{owner}'s docstring does not say it is the one module that imports {library}")


def test_package_init_modules_are_pure() -> None:
    """Package __init__ modules import nothing forbidden (importing a package runs them)."""
    for path in MODULES:
        if path.name == "__init__.py" and _rel(path) != "reconciler/commands/__init__.py":
            assert not {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN_IN_PURE}, path
