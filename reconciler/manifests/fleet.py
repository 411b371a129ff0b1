"""One repository, many nodes: which roles each node runs (PURE; BEHAVIOUR §10).

The loader gives a ``Fleet``: every role as its manifest says it (before any
node's defaults), every Model, every NodeConfig. A reconciler runs on one
node, picked by ``choose`` from a ``NodeChoice`` (``--node``, else
``$RECONCILER_NODE``, else the host name), and plans that node's share,
``desired_for(fleet, node)``: the roles placed on it, each merged with the
node's defaults (restart policy, keep_alive) and its model sizes, the Models
with this node's roots. Placement is decided here, before ``plan()``.

Rules where the contract is silent:

* **Which NodeConfig is mine.** The one named like this node. A set with no
  NodeConfig has one implicit node (every default, no labels) of this node's
  name. Without an explicit name (no ``--node``, no ``$RECONCILER_NODE``) a
  set with exactly one NodeConfig is this node whatever its name: a
  single-node repository works as it always did. Otherwise a node whose name
  no NodeConfig has is not in the fleet: it runs nothing (``choose`` → None).
* **Placement.** Absent: every node. ``nodes``: a node of one of these names.
  ``node_selector``: Kubernetes label-selector semantics (``labels.py``). Both
  given: both must hold, as a Kubernetes pod with ``nodeName`` and a
  ``nodeSelector`` needs both. DaemonSet-like: a role runs on every node it
  matches, each node's ledger admitting it on its own.
* **Model roots.** A NodeConfig's ``model_roots {model: /dir}`` replaces that
  Model's ``root`` on that node; the digests stay the Model's, so a copy at
  another path must still verify.
"""

from __future__ import annotations

from itertools import compress
from typing import Iterable, Mapping, Sequence

import attrs

from reconciler.core.desired import (
    Desired,
    ModelSpec,
    NodeConfig,
    ProgramSpec,
    RoleSpec,
    sorted_by_name,
)
from reconciler.core.instances import instance_name, instances
from reconciler.core.labels import Selector
from reconciler.core.rollouts import Rollout
from reconciler.runtimes import spec_of

frozen = attrs.frozen(kw_only=True)


@frozen
class Placement:
    """``spec.placement``: which nodes may run a role."""

    nodes: frozenset[str] | None = None  # node names; None: any name
    selector: Selector | None = None  # None: any labels

    def admits(self, name: str, labels: Mapping[str, str]) -> bool:
        return ((self.nodes is None or name in self.nodes)
                and (self.selector is None or self.selector.matches(labels)))


@frozen
class FleetRole:
    """A role as its manifest says it: the node's defaults are merged in per node."""

    spec: RoleSpec
    restart: tuple[tuple[str, float], ...] = ()  # only the fields the role overrides
    keep_alive: float | None = None  # None: the node's default
    weights: int | None = None  # None: the model's shard sizes
    placement: Placement | None = None  # None: every node


@frozen
class NodeChoice:
    """Which node this reconciler is: a name, and whether the operator gave it."""

    name: str
    explicit: bool = False  # --node or $RECONCILER_NODE (not just the host name)


@frozen
class Fleet:
    """A whole validated manifest set."""

    roles: tuple[FleetRole, ...] = ()  # sorted by name
    models: tuple[ModelSpec, ...] = ()  # sorted by name
    nodes: tuple[NodeConfig, ...] = ()  # the declared NodeConfigs, sorted by name
    rollouts: tuple[Rollout, ...] = ()  # §13 the Rollout documents, sorted by name
    programs: tuple[ProgramSpec, ...] = ()  # sorted by name (§14)

    def node(self, name: str) -> NodeConfig | None:
        return next((n for n in self.nodes if n.name == name), None)


def implicit_node(name: str = "") -> NodeConfig:
    """The node of a set without NodeConfig: every default, no labels."""
    return NodeConfig(name=name)


def members(fleet: Fleet, implicit: str = "") -> tuple[NodeConfig, ...]:
    """The nodes of the fleet: its NodeConfigs, or the one implicit node."""
    return fleet.nodes or (implicit_node(implicit),)


def choose(fleet: Fleet, choice: NodeChoice) -> NodeConfig | None:
    """This node's NodeConfig, or None when this node is not in the fleet."""
    if not fleet.nodes:
        return implicit_node(choice.name)
    named = fleet.node(choice.name)
    if named is not None:
        return named
    if not choice.explicit and len(fleet.nodes) == 1:
        return fleet.nodes[0]
    return None


def placements(roles: Sequence[FleetRole], nodes: Sequence[NodeConfig]) -> dict[str, tuple[str, ...]]:
    """Role name → the names of the nodes it is placed on, in node order.

    A fleet's nodes share a few label sets (10,000 nodes, a few dozen): each
    selector is matched once per set.
    """
    names = [n.name for n in nodes]
    sets: dict[tuple, int] = {}  # each distinct label set → its index (hashed once per node)
    which = [sets.setdefault(n.labels, len(sets)) for n in nodes]
    as_dicts = [dict(lab) for lab in sets]
    out: dict[str, tuple[str, ...]] = {}
    for role in roles:
        where = role.placement
        if where is None:
            out[role.spec.name] = tuple(names)
        elif where.selector is None:
            out[role.spec.name] = tuple(n for n in names
                                        if where.nodes is None or n in where.nodes)
        else:
            sel, only = where.selector, where.nodes
            admitted = [sel.matches(d) for d in as_dicts]
            picked = compress(names, map(admitted.__getitem__, which))
            out[role.spec.name] = tuple(picked if only is None else filter(only.__contains__, picked))
    return out


def by_node(roles: Sequence[FleetRole], placed: Mapping[str, tuple[str, ...]],
            nodes: Iterable[NodeConfig]) -> dict[str, list[FleetRole]]:
    """Node name → the roles placed on it, by role name."""
    out: dict[str, list[FleetRole]] = {n.name: [] for n in nodes}
    for role in roles:
        for name in placed.get(role.spec.name, ()):
            out[name].append(role)
    return out


def desired_for(fleet: Fleet, node: NodeConfig, *,
                placed: Mapping[str, tuple[str, ...]] | None = None,
                roles: Sequence[FleetRole] | None = None,
                merged: dict | None = None) -> Desired:
    """This node's share of the fleet (pass ``placed``/``roles`` when already known).

    ``merged``: a dict kept across the nodes of one fleet, so that nodes with the
    same defaults share one merged RoleSpec per role (one object: the planner's
    launches are then worked out once, not once per node).
    """
    if placed is None:
        placed = placements(fleet.roles, members(fleet, node.name))
    if roles is None:
        roles = [r for r in fleet.roles if node.name in placed.get(r.spec.name, ())]
    models = models_on(fleet.models, node)
    by_name = {m.name: m for m in models}
    mine = {r.spec.name for r in roles}
    specs = tuple(_merged(r, by_name.get(r.spec.model or ""), node, merged) for r in roles)
    if any(s.replicas > 1 for s in specs):  # §12 each role's instances, in name order
        specs = sorted_by_name(i for s in specs for i in instances(s))
    return Desired(
        roles=specs,
        models=models,
        node=node,
        placed_elsewhere=tuple((name, placed.get(r.spec.name, ()))
                               for r in fleet.roles if r.spec.name not in mine
                               for name in _names(r.spec)),
        programs=programs_on(fleet.programs, node),
    )


def _names(spec: RoleSpec) -> tuple[str, ...]:
    """§12 the names a role's instances have (its own alone without replicas)."""
    if spec.replicas <= 1:
        return (spec.name,)
    return tuple(sorted(instance_name(spec.name, i) for i in range(spec.replicas)))


def programs_on(programs: tuple[ProgramSpec, ...], node: NodeConfig) -> tuple[ProgramSpec, ...]:
    """§14 the Programs with this node's roots: a Program with a ``source`` lives in the
    node's fetch cache (one tree per file list), and has no root on a node that never
    fetches (a role on it is refused, saying so)."""
    if node.fetch is None or not any(p.source is not None for p in programs):
        return programs
    return tuple(attrs.evolve(p, root=program_tree(node.fetch.cache, p))
                 if p.source is not None else p for p in programs)


def program_tree(cache: str, program: ProgramSpec) -> str:
    """Where a fetched Program's files are unpacked (§14): one tree per name and file list."""
    return f"{cache.rstrip('/')}/programs/{program.name}/{program.digest[:16]}"


def models_on(models: tuple[ModelSpec, ...], node: NodeConfig) -> tuple[ModelSpec, ...]:
    """The Models with this node's ``model_roots`` in place of their roots.

    On a node that fetches (§1.6), a Model with a source and no ``model_roots``
    entry is served from the cache: its root is the cache's tree for it.
    """
    if not node.model_roots and node.fetch is None:
        return models
    roots = dict(node.model_roots)
    if node.fetch is not None:
        for m in models:
            if m.fetchable and m.name not in roots:
                roots[m.name] = cache_tree(node.fetch.cache, m.name,
                                           m.fetch_generation(node.fetch.hf_endpoint))
    return sorted_by_name(attrs.evolve(m, root=roots[m.name]) if m.name in roots else m
                          for m in models)


def cache_tree(cache: str, model: str, generation: str) -> str:
    """Where a fetched Model's files are linked under the node's cache (§1.6): one tree
    per generation, so that a new one changes the role's launch (and restarts it)."""
    return f"{cache.rstrip('/')}/models/{model}/{generation}"


def _merged(role: FleetRole, model: ModelSpec | None, node: NodeConfig,
            merged: dict | None) -> RoleSpec:
    if merged is None:
        return role_on(role, model, node)
    # role_on reads the role, its model and these two of the node's defaults.
    key = (id(role), model, node.restart, node.keep_alive)
    got = merged.get(key)
    if got is None or got[0] is not role:  # the role itself is kept: its id stays its own
        got = merged[key] = (role, role_on(role, model, node))
    return got[1]


def role_on(role: FleetRole, model: ModelSpec | None, node: NodeConfig) -> RoleSpec:
    """The role on ``node``: its defaults and the model's size merged in."""
    spec = role.spec
    weights = role.weights if role.weights is not None else (
        model.weights_size if model is not None else 0)
    keep_alive = None
    if spec_of(spec.runtime).loads_models:  # keep_alive is how long a loaded model stays
        keep_alive = role.keep_alive if role.keep_alive is not None else node.keep_alive
    return attrs.evolve(
        spec,
        restart=attrs.evolve(node.restart, **dict(role.restart)) if role.restart else node.restart,
        keep_alive=keep_alive,
        memory=attrs.evolve(spec.memory, weights=weights),
    )


def names(nodes: Iterable[str], limit: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 7 more``: node names in a message."""
    listed = list(nodes)
    if len(listed) <= limit:
        return ", ".join(listed)
    return ", ".join(listed[:limit]) + f" and {len(listed) - limit} more"


def fetched_models(desired: Desired) -> tuple[ModelSpec, ...]:
    """§1.6 the Models this node serves from its fetch cache: with a source, used by a
    managed role, not replaced by a ``model_roots`` copy."""
    fetch = desired.node.fetch
    if fetch is None:
        return ()
    used = {n for r in desired.roles if r.managed for n in (r.model, r.serve.draft_model) if n}
    return tuple(m for m in desired.models if m.name in used and m.fetchable
                 and m.root == cache_tree(fetch.cache, m.name,
                                          m.fetch_generation(fetch.hf_endpoint)))
