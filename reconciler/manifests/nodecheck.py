"""Checks of every node's world: what each node would run, checked as that node (PURE; §10).

``reconcile validate`` checks the whole fleet, not only the node it runs on.
For every node, the roles placed on it must fit that node: ports inside its
``allowed_ports`` and no two roles on one ``host:port`` (errors, as for one
node); a managed role without the node's serve program, a node without
``allowed_ports``, and always-on footprints beyond its ``memory_budget``
(warnings: the ledger refuses what does not fit, at run time). Across the
fleet: a placement that matches no node, a ``nodes`` entry no NodeConfig has,
and a selector label that no node carries (warnings; ``NotIn`` and
``DoesNotExist`` are left alone, as a label that is nowhere is what they expect).

A problem that one role has on many nodes is reported once, naming them.
With a single node every message reads as it did before there were fleets.
§12 a role's instances (``replicas``) listen on ``serve.port + i``: each of
those ports is checked too, reported at ``$.spec.replicas``.

Size: one walk over the nodes gathers every per-node check of a role set (ports,
instance ports, collisions, programs, devices, the router's), each a small function.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, NamedTuple, Sequence

from reconciler.manifests import devicecheck, fleet
from reconciler.core.desired import ModelSpec, NodeConfig, WantedState
from reconciler.core.instances import instance_name
from reconciler.manifests.documents import RoleDraft
from reconciler.core.errors import Problem
from reconciler.core.labels import Operator
from reconciler.runtimes import SPECS, spec_of
from reconciler.core.units import format_size
from reconciler.manifests.yamlsafe import Document

Node = tuple[NodeConfig, Document | None]  # the implicit node has no document


def check(drafts: Sequence[RoleDraft], nodes: Sequence[Node],
          models: Mapping[str, ModelSpec]) -> tuple[list[Problem], list[Problem]]:
    """Problems and warnings of every node's share of ``drafts``."""
    configs = [n for n, _ in nodes]
    placed = fleet.placements([d.role() for d in drafts], configs)
    shares: dict[str, list[RoleDraft]] = {n.name: [] for n in configs}
    for draft in drafts:
        for name in placed[draft.spec.name]:
            shares[name].append(draft)
    many = len(nodes) > 1
    problems: list[Problem] = []
    warnings: list[Problem] = []
    ports: dict[tuple[int, str], list[str]] = defaultdict(list)  # (draft, range) → nodes
    collisions: dict[tuple[int, int], list[str]] = defaultdict(list)  # (draft, first) → nodes
    programs: dict[tuple[int, str], list[str]] = defaultdict(list)  # (draft, runtime) → nodes
    replica_ports: dict[tuple[int, str], list[str]] = defaultdict(list)  # §12 (draft, range)
    instance_hits: dict[tuple[int, int], tuple[str, list[str]]] = {}  # §12 (draft, i) → message
    by_id = {id(d): d for d in drafts}
    sizes = {id(d): _footprint(d, models) for d in drafts}  # each role's, once for every node
    placed_once: dict[object, list[str]] = {}  # devicecheck's placements, per device set
    claims: dict[tuple[int, int], str] = {}  # (draft, alias index) → message
    same: dict[tuple[int, ...], _Share] = {}  # what depends on the roles alone, per role set
    for config, doc in nodes:
        share = shares[config.name]
        key = tuple(map(id, share))
        facts = same.get(key)
        if facts is None:
            facts = same[key] = _share(share, sizes)
            for claim, message in _name_claims(share):
                claims.setdefault(claim, message)
        for draft in share:
            if not config.port_allowed(draft.spec.serve.port):
                ports[(id(draft), str(config.allowed_ports))].append(config.name)
            if draft.spec.replicas > 1:
                replica_ports[(id(draft), str(config.allowed_ports))] += [
                    config.name] if _outside(draft, config) else []
            spec = draft.spec
            if spec.managed and spec_of(spec.runtime).launched and spec.program is None and \
                    config.serve_program(spec.runtime) is None:
                programs[(id(draft), str(spec.runtime))].append(config.name)
        for later, first in facts.collisions:
            collisions[(id(later), id(first))].append(config.name)
        for key, message in facts.instances:
            instance_hits.setdefault(key, (message, []))[1].append(config.name)
        warnings += _node_warnings(config, doc, share, facts, drafts)
        placed_devices = devicecheck.check(config, doc, share, lambda d: sizes[id(d)], many,
                                           placed_once)
        problems += placed_devices[0]
        warnings += placed_devices[1]
        routed = _router_checks(config, doc, share, sizes, many)
        problems += routed[0]
        warnings += routed[1]
    where = {n.name: d for n, d in nodes}
    for (key, index), message in claims.items():
        problems.append(by_id[key].doc.problem(("spec", "aliases", index), message))
    for (key, allowed), on in ports.items():
        draft = by_id[key]
        doc = where[on[0]]
        at = f" (NodeConfig at {doc.file}:{doc.line})" if doc is not None and not many else ""
        problems.append(draft.doc.problem(
            ("spec", "serve", "port"),
            f"port {draft.spec.serve.port} is outside allowed_ports {allowed}{_of(on, many)}{at}"))
    for (key, allowed), on in replica_ports.items():
        if on:
            draft = by_id[key]
            config = next(c for c in configs if c.name == on[0])
            name, port = _outside(draft, config)[0]
            problems.append(draft.doc.problem(
                ("spec", "replicas"), f"{name} would listen on {port}, outside allowed_ports "
                f"{allowed}{_of(on, many)} (instance i listens on serve.port + i)"))
    for (key, _), (message, on) in sorted(instance_hits.items()):
        problems.append(by_id[key].doc.problem(("spec", "replicas"), message + _of(on, many, " on")))
    shared = " or ".join(s.title for s in SPECS.values() if s.shared_endpoint) or "no"
    for (key, first_key), on in collisions.items():
        later, first = by_id[key], by_id[first_key]
        problems.append(later.doc.problem(
            ("spec", "serve", "port"),
            f"{later.spec.serve.address} is also the address of role {first.spec.name!r} "
            f"({first.doc.file}:{first.doc.line}){_of(on, many, ' on')}; "
            f"only {shared} roles may share one"))
    for (key, runtime), on in programs.items():
        warnings.append(by_id[key].doc.problem(
            ("spec", "runtime"),
            f"NodeConfig{_of(on, many)} has no serve_programs.{runtime}: this managed "
            "role cannot be started until it does"))
    warnings += _placement_warnings(drafts, configs, placed)
    return problems, warnings


def _of(on: Sequence[str], many: bool, word: str = " of") -> str:
    """`` of node gpu-1`` / `` of nodes a, b`` when the fleet has several nodes."""
    if not many:
        return ""
    return f"{word} node{'s' if len(on) > 1 else ''} {fleet.names(on)}"


def _collisions(share: Sequence[RoleDraft]) -> list[tuple[RoleDraft, RoleDraft]]:
    """(later, first) pairs of roles on one host:port of one node, unless both run on
    one shared-endpoint runtime (one Ollama serves several roles, each a model on it)."""
    by_address: dict[tuple[str, int], list[RoleDraft]] = defaultdict(list)
    for draft in share:
        by_address[(draft.spec.serve.host, draft.spec.serve.port)].append(draft)
    out = []
    for group in by_address.values():
        runtimes = {d.spec.runtime for d in group}
        if len(group) < 2 or (len(runtimes) == 1 and spec_of(runtimes.pop()).shared_endpoint):
            continue
        group = sorted(group, key=lambda d: (d.doc.file, d.doc.line))
        out += [(other, group[0]) for other in group[1:]]
    return out


class _Share(NamedTuple):
    """What a node's checks need of its roles alone, worked out once per role set."""

    collisions: list[tuple[RoleDraft, RoleDraft]]  # _collisions
    always: list[tuple[str, int]]  # the always-on roles' names and host memory
    need: int  # their sum
    instances: list[tuple[tuple[int, int], str]]  # §12 _instance_collisions


def _share(share: Sequence[RoleDraft], sizes: Mapping[int, int]) -> _Share:
    always = [(d.spec.name, _host(d, sizes) * d.spec.replicas) for d in share
              if d.spec.state is WantedState.RUNNING]
    return _Share(collisions=_collisions(share), always=always,
                  need=sum(size for _, size in always), instances=_instance_collisions(share))


def _outside(draft: RoleDraft, config: NodeConfig) -> list[tuple[str, int]]:
    """§12 the instances (i ≥ 1) of ``draft`` whose port is outside ``config``'s allowlist."""
    spec = draft.spec
    return [(instance_name(spec.name, i), spec.serve.port + i) for i in range(1, spec.replicas)
            if not config.port_allowed(spec.serve.port + i)]


def _instance_collisions(share: Sequence[RoleDraft]) -> list[tuple[tuple[int, int], str]]:
    """§12 an instance (i ≥ 1) on the address of another role or instance of the node:
    ((draft, i), message), the first such address of each instance."""
    if all(d.spec.replicas <= 1 for d in share):
        return []
    owner: dict[tuple[str, int], tuple[RoleDraft, str]] = {}
    for draft in sorted(share, key=lambda d: (d.doc.file, d.doc.line)):
        owner.setdefault((draft.spec.serve.host, draft.spec.serve.port), (draft, draft.spec.name))
    out = []
    for draft in sorted(share, key=lambda d: (d.doc.file, d.doc.line)):
        spec = draft.spec
        for i in range(1, spec.replicas):
            name, port = instance_name(spec.name, i), spec.serve.port + i
            first = owner.setdefault((spec.serve.host, port), (draft, name))
            if first[0] is draft and first[1] == name:
                continue
            what = (f"role {first[1]!r} ({first[0].doc.file}:{first[0].doc.line})"
                    if "/" not in first[1] else f"instance {first[1]}")
            out.append(((id(draft), i), f"{name} would listen on {port}, the port of {what}"))
    return out


def _node_warnings(config: NodeConfig, doc: Document | None, share: Sequence[RoleDraft],
                   facts: _Share, drafts: Sequence[RoleDraft]) -> list[Problem]:
    out: list[Problem] = []
    if share and config.allowed_ports is None:
        where = doc if doc is not None else drafts[0].doc
        out.append(where.problem(("spec",) if doc is not None else (),
                                 "no allowed_ports in NodeConfig: any port may be "
                                 "probed and served; set allowed_ports {from, to}"))
    if config.memory_budget is None or doc is None:
        return out
    always, need = facts.always, facts.need
    if need > config.memory_budget:
        held = ", ".join(f"{name} {format_size(size)}" for name, size in
                         sorted(always, key=lambda item: (-item[1], item[0]))[:5])
        out.append(doc.problem(("spec", "memory_budget"),
                               f"the always-on roles placed on node {config.name!r} need "
                               f"{format_size(need)}, more than its memory_budget "
                               f"{format_size(config.memory_budget)}: not all of them can run "
                               f"at once ({held})"))
    return out


def _router_checks(config: NodeConfig, doc: Document | None, share: Sequence[RoleDraft],
                   sizes: Mapping[int, int], many: bool,
                   ) -> tuple[list[Problem], list[Problem]]:
    """§9: the router's port is no role's; on-demand roles need a router and must fit.

    The router's own port need not be inside ``allowed_ports``: that range
    bounds the ports the reconciler *connects to* (its roles'), and the
    router only listens on its port. It may not be a role's port on the node.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    router = config.router
    on_demand = [d for d in share if d.spec.on_demand]
    if router is not None and doc is not None:
        for draft in share:
            if draft.spec.serve.port == router.port:
                problems.append(doc.problem(
                    ("spec", "router", "listen"),
                    f"port {router.port} is also the port of role {draft.spec.name!r} "
                    f"({draft.doc.file}:{draft.doc.line}); the router needs a port of its own"))
            if 0 < router.port - draft.spec.serve.port < draft.spec.replicas:
                problems.append(draft.doc.problem(
                    ("spec", "replicas"), f"{instance_name(draft.spec.name, router.port - draft.spec.serve.port)} "
                    f"would listen on {router.port}, the router's port"))
    page = config.status_page
    if page is not None and doc is not None:  # §11 the status page's port is its own too
        taken = [(f"role {d.spec.name!r} ({d.doc.file}:{d.doc.line})", d.spec.serve.port)
                 for d in share] + [("the router's", router.port if router else None)]
        for what, port in taken:
            if port == page.port:
                problems.append(doc.problem(
                    ("spec", "status_page", "listen"),
                    f"port {page.port} is also the port of {what}; the status page needs a "
                    "port of its own"))
    for draft in on_demand:
        if router is None:
            node = f" {config.name!r}" if many else ""
            warnings.append(draft.doc.problem(
                ("spec", "state"), f"state: on-demand, but NodeConfig{node} has no router: "
                "nothing will ever ask for this role, so it never starts"))
        need = sizes[id(draft)]
        if config.memory_budget is not None and need > config.memory_budget:
            warnings.append(draft.doc.problem(
                ("spec", "memory"), f"needs {format_size(need)}, more than the whole "
                f"memory_budget {format_size(config.memory_budget)}"
                f"{_of([config.name], many)}: it can never start"))
    return problems, warnings


def _host(draft: RoleDraft, sizes: Mapping[int, int]) -> int:
    """What a role counts against ``memory_budget``: ``memory.host`` when on devices (§7.1)."""
    if draft.spec.devices is not None and spec_of(draft.spec.runtime).devices is not None:
        return draft.spec.memory.host
    return sizes[id(draft)]


def _name_claims(share: Sequence[RoleDraft]) -> list[tuple[tuple[int, int], str]]:
    """§9: an alias names one role of a node: no other role's alias, role or Model name."""
    owner: dict[str, RoleDraft] = {}
    for draft in share:
        for name in (draft.spec.name, draft.spec.model):
            if name:
                owner.setdefault(name, draft)
    out = []
    for draft in sorted(share, key=lambda d: d.spec.name):
        for i, alias in enumerate(draft.spec.aliases):
            first = owner.setdefault(alias, draft)
            if first is not draft:
                out.append(((id(draft), i), f"{alias!r} is also a name of role "
                            f"{first.spec.name!r} ({first.doc.file}:{first.doc.line}) on this "
                            "node: a name a client sends must mean one role"))
    return out


def _footprint(draft: RoleDraft, models: Mapping[str, ModelSpec]) -> int:
    model = models.get(draft.spec.model or "")
    weights = draft.weights if draft.weights is not None else (
        model.weights_size if model is not None else 0)
    return weights + draft.spec.memory.kv


def _placement_warnings(drafts: Sequence[RoleDraft], configs: Sequence[NodeConfig],
                        placed: Mapping[str, tuple[str, ...]]) -> list[Problem]:
    known = {n.name for n in configs}
    have = {key for n in configs for key, _ in n.labels}
    every = fleet.names(sorted(known))
    out: list[Problem] = []
    for draft in drafts:
        where = draft.placement
        if where is None:
            continue
        doc = draft.doc
        if not placed[draft.spec.name]:
            out.append(doc.problem(("spec", "placement"),
                                   f"matches no node, so no node runs it (nodes: {every})"))
        raw = doc.value.get("spec", {}).get("placement", {})  # type: ignore[union-attr]
        for i, name in enumerate(raw.get("nodes") or ()):
            if name not in known:
                out.append(doc.problem(("spec", "placement", "nodes", i),
                                       f"no NodeConfig named {name!r}"))
        selector = raw.get("node_selector") or {}
        base = ("spec", "placement", "node_selector")
        for key in selector.get("match_labels") or {}:
            if key not in have:
                out.append(doc.problem(base + ("match_labels", key),
                                       f"no node has the label {key!r}"))
        for i, term in enumerate(selector.get("match_expressions") or ()):
            if term["key"] not in have and term["operator"] not in _ABSENCE_IS_FINE:
                out.append(doc.problem(base + ("match_expressions", i, "key"),
                                       f"no node has the label {term['key']!r}"))
    return out


_ABSENCE_IS_FINE = (str(Operator.NOT_IN), str(Operator.DOES_NOT_EXIST))
