"""The runtime registry: one pure module per runtime, one table (PURE).

Each runtime module (``llamacpp``, ``mlx_lm``, ``ollama``, ``openai``) knows its
server's command line, its probe requests and how to read the answers, and
declares all of it in one ``RuntimeSpec`` (``spec.py``). ``SPECS`` maps every
``Runtime`` to its declaration; ``spec_of(runtime)`` is how the rest of the
package asks what a runtime can do, ``lookup(runtime, spelling)`` which flag a
spelling is on its server. The runtime modules never import this registry
(it imports them): the import test finds such a cycle even inside a function. Nothing here opens a socket: the observer
sends the requests these modules describe and hands the answers back.

Adding a runtime: a module ending in ``SPEC = RuntimeSpec(...)``, its line in
``SPECS``, its ``Runtime`` member and its entry in the InferenceSpec schema's
``runtime`` enum (``tests/observe/test_runtime_contract.py`` checks them all).
"""

from __future__ import annotations

from typing import Mapping

from reconciler.core.desired import ModelSpec, RoleSpec, Runtime
from reconciler.runtimes import llamacpp, llamacpp_tables, mlx_lm, ollama, openai
from reconciler.runtimes.flags import Flag, FlagTable
from reconciler.runtimes.spec import RuntimeSpec

#: Every runtime's declaration, in the order people read them.
SPECS: Mapping[Runtime, RuntimeSpec] = {
    spec.runtime: spec for spec in (llamacpp.SPEC, mlx_lm.SPEC, ollama.SPEC, openai.SPEC)
}


def spec_of(runtime: Runtime) -> RuntimeSpec:
    """The declaration of ``runtime`` (``KeyError`` for a runtime with no module)."""
    return SPECS[runtime]


def lookup(runtime: Runtime, spelling: str) -> Flag | None:
    """The flag ``spelling`` names on ``runtime``'s server, exactly as the server reads it
    (none for a runtime the reconciler never launches: its table is empty)."""
    return SPECS[runtime].flags.find(spelling)


def flags_for(runtime: Runtime, version: str | None) -> FlagTable:
    """§1.4 the table a role's ``extra_args`` are judged by when its Program is ``version``
    (None: an unpinned path): llama-server's per build (``llamacpp_tables``), else the
    runtime's one table."""
    if runtime is Runtime.LLAMACPP:
        return llamacpp_tables.table_for(version)
    return SPECS[runtime].flags


def table_note(runtime: Runtime, version: str) -> str | None:
    """§1.4 why a Program of ``version`` is judged by another build's table, None when it
    has its own (or its runtime has one table)."""
    return llamacpp_tables.note(version) if runtime is Runtime.LLAMACPP else None


def launched() -> tuple[RuntimeSpec, ...]:
    """The runtimes whose servers the reconciler starts itself."""
    return tuple(spec for spec in SPECS.values() if spec.launched)


def launch_argv(role: RoleSpec, model: ModelSpec | None, draft: ModelSpec | None,
                weights: Mapping[str, ModelSpec] | None = None,
                version: str | None = None) -> tuple[str, ...]:
    """The server's arguments (without the program) for a managed role.

    ``weights``: the Models by name, for the role's other weight files (mmproj, LoRAs).
    ``version``: the version of the Program that runs it (§14; None: a path): its build's
    flag table, the one ``validate`` judged ``extra_args`` by, cuts each ``--flag=value``
    in two (a flag another build does not know stays one entry there).
    """
    build = spec_of(role.runtime).argv
    if build is None:
        raise ValueError(f"runtime {role.runtime} is never launched")
    return build(role, model, draft, weights or {}, flags_for(role.runtime, version))
