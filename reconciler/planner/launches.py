"""Launches worked out once per role declaration, not once per pass (PURE; BEHAVIOUR §3, §7.1).

For every managed role on every pass the planner needs its instance id, the
devices its launch is built with before placement, its argv and its launch
digest; for the ones it starts, the whole ``Launch``; for a claim placement
moved, the same again with the devices it got. All of them are functions of
values that change only when the manifests do: the ``RoleSpec``, the Models
its server loads, the devices the role last ran on (a ``count`` request keeps
them), the node's launch settings (programs, env, passthrough, run_as,
devices), the values of the passed-through variables and the data root.

``Launches`` keeps what it worked out, keyed by exactly those values (the
node's settings pick the ``Launches``, its set of Models the table, the spec
and the devices the entry), so a
pass over unchanged manifests (``reconcile watch``) and the nodes of a fleet
that share a role (``reconcile fleet``) pay for each launch once. It stays
pure: a memo of a pure function returns what the function returns; keys are
values (equal values hit, whatever object carries them), nothing here reads
the clock, a file or the environment. ``for_node`` hands out one
``Launches`` per node launch settings. Both are bounded (``LIMIT``): past
it, a table is emptied and filled again, which costs time, never a wrong
answer. Two threads planning at once may both work out a launch; either
result is the same value.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from reconciler.core.decisions import Restart, Start
from reconciler.core.desired import Launch, ModelSpec, NodeConfig, ProgramSpec, RoleSpec, Runtime
from reconciler.core.devices import Assignment
from reconciler.core.observed import RoleRecord
from reconciler.planner import generations, identity, placement
from reconciler.planner.placement import Claim
from reconciler.runtimes import spec_of

#: Entries a table holds before it is emptied (a launch is ~2 KB: ~100 MB at worst).
LIMIT = 50_000
#: Nodes remembered at once (placement's bound: a fleet planned in one process; a fleet's nodes
#: mostly share their launch settings, so ``_NODES`` stays small and ``_SAME`` holds one entry
#: per node).
NODES = placement.NODES
#: Sets of Models remembered per node settings (a new set comes with an edited Model).
MODEL_SETS = 64


@attrs.define(kw_only=True)
class Prepared:
    """One role's launch as the planner builds it (not frozen: ``launch`` is filled on demand)."""

    instance_id: str
    assignment: Assignment | None  # the devices it is built with (None: host-only, or to pick)
    argv: tuple[str, ...] | None  # None: a runtime the reconciler never launches
    digest: str | None
    extra_env: tuple[tuple[str, str], ...] = ()  # the assignment's visibility variables
    claim: Claim | None = None  # what it asks of the devices (None: host-only)
    generation: str | None = None  # what it runs (§4): this launch, or the load it asks for
    whole: Launch | None = None
    program: ProgramSpec | None = None  # §14 the Program it runs (``Launcher.pinned``)
    #: The ``Start`` of this launch (``rungs``: built once, then kept with it; fewer values
    #: built per start per pass, and fewer of each pass left for the collector).
    start: Start | None = None
    restart: Restart | None = None  # (its ``replaces``: the role's process, the same object)


class Launches:
    """The launches of one node's settings, remembered by the values they are built from.

    ``bind(models)`` gives one pass's view: the tables of that set of Models (so a
    role's key is its spec and, for a count request, the devices it last ran on).
    """

    def __init__(self, launcher: identity.Launcher) -> None:
        self.launcher = launcher
        self._tables: dict[tuple[ModelSpec, ...], _Tables] = {}

    def bind(self, models: tuple[ModelSpec, ...], by_name: Mapping[str, ModelSpec]) -> Bound:
        """This pass's launches: ``models`` are the node's Models (``by_name``: the same, by name)."""
        tables = self._tables.get(models)
        if tables is None:
            tables = _Tables()
            if len(self._tables) >= MODEL_SETS:
                self._tables.clear()
            self._tables[models] = tables
        return Bound(self.launcher, tables, by_name)


class _Tables:
    __slots__ = ("prepared", "placed")

    def __init__(self) -> None:
        self.prepared: dict[tuple, Prepared] = {}
        self.placed: dict[tuple, Prepared] = {}


class Bound:
    """One pass's launches: one node's settings and Models."""

    __slots__ = ("launcher", "devices", "models", "_tables")

    def __init__(self, launcher: identity.Launcher, tables: _Tables,
                 models: Mapping[str, ModelSpec]) -> None:
        self.launcher = launcher
        self.devices = launcher.devices
        self.models = models
        self._tables = tables

    def prepare(self, spec: RoleSpec, record: RoleRecord | None) -> Prepared:
        """The role's launch before placement (§7.1 ``placement.preferred``)."""
        request = spec.devices
        # Only a count request reads the record: it keeps the devices it last ran on.
        key = (spec, record.devices if (record is not None and request is not None
                                        and not request.ids) else ())
        got = self._tables.prepared.get(key)
        if got is None:
            assignment = (placement.preferred(spec, record, self.devices)
                          if request is not None else None)
            got = self._build(spec, assignment, identity.instance_id(spec))
            got.claim = placement.claim_of(spec, assignment) if request is not None else None
            got.generation = generations.current(spec, got.digest,
                                                 generations.tag_of(spec, self.models))
            _remember(self._tables.prepared, key, got)
        return got

    def placed(self, spec: RoleSpec, got: Assignment, instance: str) -> Prepared:
        """The role's launch on the devices placement gave it (``got``: their ids and bytes)."""
        key = (spec, got.ids, got.bytes, instance)
        found = self._tables.placed.get(key)
        if found is None:
            split = spec.devices.split if spec.devices else ()
            found = self._build(spec, Assignment(ids=got.ids, bytes=got.bytes, split=split),
                                instance)
            # What it runs (§4), worked out once with it, not once per pass (a
            # restarted_at makes it a hash of the digest).
            found.generation = generations.current(spec, found.digest, None)
            _remember(self._tables.placed, key, found)
        return found

    def launch(self, spec: RoleSpec, prepared: Prepared) -> Launch:
        """The whole launch of ``prepared`` (built once, then kept with it)."""
        if prepared.whole is None:
            assert prepared.argv is not None
            prepared.whole = self.launcher.launch(prepared.argv, prepared.instance_id,
                                                  prepared.digest, prepared.extra_env, spec)
        return prepared.whole

    def _build(self, spec: RoleSpec, assignment: Assignment | None, instance: str) -> Prepared:
        argv = self.launcher.argv(spec, self.models, assignment)
        extra = device_env(spec.runtime, assignment)
        digest = (self.launcher.digest(argv, instance, extra, spec)
                  if argv is not None else None)
        return Prepared(instance_id=instance, assignment=assignment, argv=argv, digest=digest,
                        extra_env=extra, program=self.launcher.pinned(spec))


def device_env(runtime: Runtime, assignment: Assignment | None) -> tuple[tuple[str, str], ...]:
    """The visibility variables of ``assignment`` for ``runtime`` (§7.1)."""
    rt = spec_of(runtime).devices
    return rt.env(assignment) if rt is not None and assignment else ()


_NODES: dict[tuple, Launches] = {}
#: The same NodeConfig object pass after pass (``watch``): found without hashing its
#: values again. id → (the node itself, passed, data root, its Launches).
_SAME: dict[int, tuple[NodeConfig, tuple, str, Launches, tuple]] = {}


def for_node(node: NodeConfig, environ: Mapping[str, str], data_root: str,
             programs: tuple[ProgramSpec, ...] = ()) -> Launches:
    """The ``Launches`` of ``node``'s launch settings, this environment, data root and the
    Programs its roles may run (§14)."""
    passed = tuple((name, environ.get(name)) for name in node.env_passthrough)
    same = _SAME.get(id(node))
    if same is not None and same[0] is node and same[1] == passed and same[2] == data_root \
            and same[4] == programs:
        return same[3]
    key = (node.serve_programs, node.env, node.env_passthrough, passed, node.run_as,
           node.devices, data_root, programs)
    got = _NODES.get(key)
    if got is None:
        got = Launches(identity.Launcher(node, environ, data_root, programs))
        if len(_NODES) >= NODES:
            _NODES.clear()
        _NODES[key] = got
    if len(_SAME) >= NODES:
        _SAME.clear()
    _SAME[id(node)] = (node, passed, data_root, got, programs)  # keeps the node: its id stays its own
    return got


def _remember(table: dict, key: tuple, value: Prepared) -> None:
    if len(table) >= LIMIT:
        table.clear()
    table[key] = value


def forget() -> None:
    """Empty every table (benchmarks time a first pass with this; nothing else needs it)."""
    _NODES.clear()
    _SAME.clear()
