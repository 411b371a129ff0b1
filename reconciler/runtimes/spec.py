"""What a runtime is and can do: the one declaration each runtime module makes (PURE).

Every runtime module under ``reconciler/runtimes/`` ends with
``SPEC = RuntimeSpec(...)``, and ``runtimes/__init__.py`` maps each ``Runtime``
to its SPEC. Everything that varies between runtimes is a field here: whether
the reconciler launches the server, whether several roles share one server,
which model formats it loads, its command line, its probe exchange and answer
reader, readiness after a start, its deep-health request, how it names models
and which ``extra_args`` it accepts. Callers ask what a runtime *can do*
(``spec.launched``, ``spec.shared_endpoint``, ``spec.loads_models``), never
which runtime it is (STYLE.md, "One seam per varying thing"); a contract test
(``tests/observe/test_runtime_contract.py``) runs every rule over every entry.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import attrs

from reconciler.core.devices import Assignment, DeviceKind, index_of, kind_of
from reconciler.core.desired import ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime
from reconciler.core.observed import ProbeFacts, Progress
from reconciler.runtimes.common import (
    Exchange,
    ProbeAnswer,
    ProbeContext,
    ProbeRequest,
    names_match,
)
from reconciler.runtimes.flags import EMPTY, FlagTable


@attrs.frozen(kw_only=True)
class DeviceLaunch:
    """How a runtime's launch follows the planner's device assignment.

    ``visibility``: per device kind, the environment variable that shows the
    server only its assigned devices (their indices, comma-separated); a kind
    without one (``metal``: unified memory) sets nothing. ``split_flag``: the
    flag that spreads the model over several devices, with the proportions.
    ``owned_flags``: the flags (every spelling) that are the planner's once a
    role sets ``spec.placement.devices``: setting them by hand is an error.
    """

    kinds: frozenset[DeviceKind]
    visibility: Mapping[DeviceKind, str] = attrs.field(factory=dict)
    #: Set beside the visibility variable: ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA
    #: count devices as nvidia-smi and NVML do (its default puts the fastest first).
    order: Mapping[DeviceKind, tuple[tuple[str, str], ...]] = attrs.field(factory=dict)
    split_flag: str | None = None
    owned_flags: frozenset[str] = frozenset()

    def env(self, assignment: Assignment) -> tuple[tuple[str, str], ...]:
        if not assignment.ids:
            return ()
        kind = _KINDS[kind_of(assignment.ids[0])]
        name = self.visibility.get(kind)
        if name is None:
            return ()
        return (*self.order.get(kind, ()),
                (name, ",".join(str(index_of(i)) for i in assignment.ids)))

    @property
    def owned_env(self) -> frozenset[str]:
        return frozenset(self.visibility.values()) | {
            k for pairs in self.order.values() for k, _ in pairs}

    def argv(self, assignment: Assignment) -> tuple[str, ...]:
        if self.split_flag is None or len(assignment.ids) < 2:
            return ()
        weights = assignment.split or (1,) * len(assignment.ids)
        return (self.split_flag, ",".join(_number(w) for w in weights))



_KINDS = {str(k): k for k in DeviceKind}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


#: (role, its model, its draft model, every Model by name, the flag table of the program
#: that runs it: §1.4, ``runtimes.flags_for``) → the server's arguments, without the program.
ArgvBuilder = Callable[[RoleSpec, ModelSpec | None, ModelSpec | None, Mapping[str, ModelSpec],
                        FlagTable], tuple[str, ...]]
#: (role, its model, the node, the names the server listed) → the one-token request, or why none.
DeepBuilder = Callable[[RoleSpec, ModelSpec | None, NodeConfig, tuple[str, ...]],
                       ProbeRequest | str]
Reader = Callable[[Mapping[str, ProbeAnswer], ProbeContext], ProbeFacts]


@attrs.frozen(kw_only=True)
class ProgressProbe:
    """A runtime's work counters (BEHAVIOUR §4.1 *no progress*): one GET, and its reader.

    ``asked``: does this role's launch expose them (llama.cpp: ``--metrics``)?
    ``read``: the answer → ``Progress``, or None when it does not hold them.
    """

    request: ProbeRequest
    asked: Callable[[RoleSpec], bool]
    read: Callable[[ProbeAnswer], Progress | None]


@attrs.frozen(kw_only=True)
class CommandLine:
    """How people write this runtime's server on a command line (``reconcile import``, §1.7)."""

    #: Program names (a path's last component); the first is how messages name the server.
    programs: tuple[str, ...]
    #: Python modules that are the server (``python -m mlx_lm.server``).
    modules: tuple[str, ...] = ()
    #: ``--model ORG/REPO`` makes the server download from the Hub (a Model with a source).
    hub_models: bool = False
    #: Rewrites older releases' spellings into the pinned server's: ``(words, find) →
    #: (words, rewrites)``; None when the table is all there is.
    modernise: Callable | None = None

    def names(self, base: str) -> bool:
        """Is ``base`` this server's program, also under a build suffix (``llama-server-ec9e0301``)?"""
        return any(base == p or base.startswith((f"{p}-", f"{p}.", f"{p}_")) for p in self.programs)


@attrs.frozen(kw_only=True, eq=False)
class RuntimeSpec:
    """Everything the reconciler knows about one runtime (compared by identity)."""

    runtime: Runtime
    title: str  # for people: "Ollama", "OpenAI-compatible servers"
    #: The reconciler starts, stops and restarts this server's process.
    launched: bool
    #: ``mode: managed`` means something: a process to run, or models to load.
    managed: bool
    #: Several roles may name one host:port (each role is one model on it);
    #: the observer asks such an endpoint once per pass for all of them.
    shared_endpoint: bool
    #: Loads and unloads models on a server it does not launch (never pulls).
    loads_models: bool
    default_port: int | None  # None: spec.serve.port is required
    #: §9.1 requests its server serves at once, when the runtime fixes it (mlx-lm: 1);
    #: None: asked of the server (llama-server's ``/props`` ``total_slots``).
    slots: int | None = None
    #: §14 its server says no version over HTTP: the observer reads it from the running
    #: process (mlx-lm: the mlx_lm package it imports, ``world/pkgversion.py``).
    version_of_process: bool = False
    formats: frozenset[ModelFormat]  # the Model formats a role of it may name
    serve_options: frozenset[str] = frozenset()  # optional spec.serve fields it takes
    #: Every flag of the real server, classified (``flags.py``); empty when never launched.
    flags: FlagTable = EMPTY
    #: Environment variables a role may set in ``spec.env`` (``X_*``: a prefix).
    env_names: tuple[str, ...] = ()
    #: Directories of the instance directory a role's server writes into (made at start).
    work_dirs: Callable[[RoleSpec], tuple[str, ...]] = lambda role: ()
    argv: ArgvBuilder | None = None  # launched runtimes only
    #: What to ask (a pure generator, see ``common.py``) and how to read the answers.
    exchange: Callable[[ProbeContext], Exchange]
    read: Reader
    #: After a start, the request that proves the model is loaded (its ``/health``
    #: answers before that). Sent only to our own live process, never to adopted ones.
    readiness: ProbeRequest | None = None
    #: The model name the server should list for a role (None: it lists nothing useful).
    wanted: Callable[[RoleSpec, ModelSpec | None], str | None]
    #: Does a listed model name mean the wanted one?
    names_match: Callable[[str, str], bool] = names_match
    identity: str  # where the server's identity (its model) is read from, for people
    deep_request: DeepBuilder
    #: Loading and unloading a model (``loads_models`` runtimes): tag, keep-alive seconds.
    load_request: Callable[[str, float | None], ProbeRequest] | None = None
    unload_request: Callable[[str], ProbeRequest] | None = None
    #: A load's or unload's answer: ``(ok, one line)`` (the executor sends nothing else).
    read_load: Callable[[ProbeRequest, ProbeAnswer], tuple[bool, str]] | None = None
    #: Work counters for the liveness check's *no progress* detector (§4.1), if any.
    progress: ProgressProbe | None = None
    #: How a launch follows a device assignment (None: the runtime takes no
    #: ``placement.devices``; its roles claim host memory only).
    devices: DeviceLaunch | None = None
    #: How a command line names this server, for ``reconcile import`` (launched runtimes).
    command_line: CommandLine | None = None

    def __str__(self) -> str:
        return str(self.runtime)

    def same(self, a: str | None, b: str | None) -> bool:
        """Do two model names mean the same model on this runtime? (None never does.)"""
        return a is not None and b is not None and self.names_match(a, b)

    def match(self, wanted: str | None, listed: Iterable[str]) -> str | None:
        """The first listed name that means ``wanted``, or None."""
        return next((name for name in listed if self.same(wanted, name)), None)

    def lists(self, listed: Iterable[str], wanted: str | None) -> bool:
        """Is ``wanted`` among the ``listed`` names?"""
        return self.match(wanted, listed) is not None
