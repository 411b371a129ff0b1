"""What a change to the manifests changes on which node: ``reconcile fleet --diff`` (PURE; §10).

``diff(old, new)`` compares two fleet views (``fleetview.view`` of a git
revision and of the checkout) node by node and role by role::

    + gpu-2 coder                      placed on gpu-2 now
    - gpu-1 coder                      no longer on gpu-1
    ~ gpu-1 chat (ctx 4096 → 8192)     on gpu-1 before and after, changed
    + gpu-3                            a node added (its roles follow as + lines)
    ~ gpu-1 (labels pool=a → pool=b)   a node's own fields changed

A role is changed when the node would launch it differently (its argv:
``ctx 4096 → 8192``; or its environment, program, working directory or
uid), when a field it is kept by changed (state, mode, memory, restart
policy, excludes, keep_alive, host, port, model), or when the node's offline
plan would now treat it otherwise (``start → refuse (unplaceable)``).
The lines come sorted by node, then role, node lines first. ``staged`` marks
each change a Rollout of the new manifests stages (§13: a spec, Model or Program
change of a role it covers that keeps running): ``~ gpu-1 coder (program b11434 →
b11500; staged: Rollout up)``; a role added, removed or stopped applies at once.
"""

from __future__ import annotations

from typing import Iterable

import attrs

from reconciler.planner import identity
from reconciler.core.desired import NodeConfig, RoleSpec, WantedState
from reconciler.core.rollouts import Rollout
from reconciler.fleet.fleetview import FleetView, NodeView, RoleView
from reconciler.core.units import format_duration, format_size


@attrs.frozen(kw_only=True, order=True)
class Change:
    node: str
    role: str = ""  # "" for a change of the node itself
    sign: str  # + - ~
    detail: str = ""

    def __str__(self) -> str:
        who = f"{self.node} {self.role}".rstrip()
        return f"{self.sign} {who}" + (f" ({self.detail})" if self.detail else "")


def diff(old: FleetView, new: FleetView) -> tuple[Change, ...]:
    """Every node and role change from ``old`` to ``new``, sorted."""
    out: list[Change] = []
    before = {n.name: n for n in old.nodes}
    after = {n.name: n for n in new.nodes}
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was is None or now is None:
            out.append(Change(node=name, sign="+" if was is None else "-"))
        else:
            changed = _node_changes(was.node, now.node)
            if changed:
                out.append(Change(node=name, sign="~", detail=changed))
        out += _role_changes(name, was, now)
    return tuple(sorted(out, key=lambda c: (c.node, c.role, c.sign)))


def staged(changes: Iterable[Change], new: FleetView,
           rollouts: Iterable[Rollout]) -> tuple[Change, ...]:
    """§13 ``changes`` with each one a Rollout stages marked ``staged: Rollout <name>``: a
    role changed on a node (``~``: its spec, or its Model or Program document, changes the
    launch), covered by a Rollout of ``new``'s manifests, and not stopped there."""
    listed = tuple(rollouts)
    if not listed:
        return tuple(changes)
    out = []
    for c in changes:
        rollout = next((r for r in listed if r.covers(c.role)), None) \
            if c.sign == "~" and c.role else None
        view = new.node(c.node)
        spec = next((r.spec for r in view.roles if r.name == c.role), None) \
            if view is not None and rollout is not None else None
        if spec is not None and spec.state is not WantedState.STOPPED:
            c = attrs.evolve(c, detail="; ".join(
                filter(None, (c.detail, f"staged: Rollout {rollout.name}"))))
        out.append(c)
    return tuple(out)


def text(changes: Iterable[Change]) -> str:
    listed = list(changes)
    if not listed:
        return "No changes on any node.\n"
    nodes = len({c.node for c in listed})
    return "\n".join(str(c) for c in listed) + (
        f"\n{len(listed)} change{'' if len(listed) == 1 else 's'} on "
        f"{nodes} node{'' if nodes == 1 else 's'}.\n")


def as_json(changes: Iterable[Change]) -> dict:
    return {"format": 1, "changes": [
        {"sign": c.sign, "node": c.node, "role": c.role or None, "detail": c.detail}
        for c in changes]}


def _role_changes(node: str, was: NodeView | None, now: NodeView | None) -> list[Change]:
    old = {r.name: r for r in (was.roles if was is not None else ())}
    new = {r.name: r for r in (now.roles if now is not None else ())}
    out = []
    for role in sorted(old.keys() | new.keys()):
        a, b = old.get(role), new.get(role)
        if a is None or b is None:
            # A role that arrives but would not run there says why (refused, stopped).
            d = b.decision if b is not None else None
            note = "" if d is None or d.acts else _NOTES.get(str(d.reason), f"{d.verb}: {d.reason}")
            out.append(Change(node=node, role=role, sign="+" if a is None else "-", detail=note))
            continue
        changed = role_changes(a, b)
        if changed:
            out.append(Change(node=node, role=role, sign="~", detail=changed))
    return out


_NOTES = {"absent": "state: stopped", "adopted": "adopted: observed only"}


def role_changes(a: RoleView, b: RoleView) -> str:
    """``ctx 4096 → 8192, memory 2.0 GB → 4.0 GB`` (empty: nothing changed)."""
    la, lb = a.launch, b.launch
    launched = la is not None and lb is not None
    parts = _spec_changes(a.spec, b.spec, launched=launched)
    if launched and la.digest != lb.digest:
        said = _program_change(la.env, lb.env)  # §14 a new Program: name its versions
        argv = identity.argv_changes(la.argv, lb.argv)
        parts[:0] = [said] if said and argv.startswith(("launch environment", "program ")) \
            else [x for x in (said, argv) if x]
    da, db = a.decision, b.decision
    if (da.verb, da.reason) != (db.verb, db.reason):
        parts.append(f"{da.verb} → {db.verb} ({db.reason})")
    return ", ".join(dict.fromkeys(parts))


def _program_change(old_env, new_env) -> str:
    """§14 ``program b11434 → b11500`` between two launches' environments (their versions,
    else their names, else their digests); "" when they run the same Program."""
    a, b = (dict(env).get(identity.PROGRAM_ENV, "") for env in (old_env, new_env))
    if a == b:
        return ""
    (na, va, da), (nb, vb, db) = ((x.split(" ") + ["", ""])[:3] if x else ("(a path)", "", "")
                                  for x in (a, b))
    if va and vb and va != vb:
        return f"program {va} → {vb}"
    return f"program {na} → {nb}" if na != nb else f"program {na} {da} → {db}"


def _spec_changes(a: RoleSpec, b: RoleSpec, *, launched: bool) -> list[str]:
    """Changed fields; for a launched role the argv already says model, address, extra_args."""
    fields = [
        ("runtime", str(a.runtime), str(b.runtime)),
        ("mode", str(a.mode), str(b.mode)),
        ("state", str(a.state), str(b.state)),
    ]
    if not launched:
        fields += [("model", a.model or "-", b.model or "-"),
                   ("address", a.serve.address, b.serve.address)]
    fields += [
        ("memory", format_size(a.memory.footprint), format_size(b.memory.footprint)),
        ("excludes", ", ".join(sorted(a.excludes)) or "-", ", ".join(sorted(b.excludes)) or "-"),
        ("keep_alive", _seconds(a.keep_alive), _seconds(b.keep_alive)),
        ("aliases", ", ".join(a.aliases) or "-", ", ".join(b.aliases) or "-"),
        ("env", " ".join(f"{k}={v}" for k, v in a.env) or "-",
         " ".join(f"{k}={v}" for k, v in b.env) or "-"),
    ]
    for field in attrs.fields(type(a.restart)):
        fields.append((f"restart.{field.name}", _number(getattr(a.restart, field.name)),
                       _number(getattr(b.restart, field.name))))
    if not launched and a.serve.extra_args != b.serve.extra_args:
        fields.append(("extra_args", " ".join(a.serve.extra_args) or "-",
                       " ".join(b.serve.extra_args) or "-"))
    return [f"{name} {x} → {y}" for name, x, y in fields if x != y]


def _node_changes(a: NodeConfig, b: NodeConfig) -> str:
    parts = []
    la, lb = dict(a.labels), dict(b.labels)
    for key in sorted(la.keys() | lb.keys()):
        if la.get(key) != lb.get(key):
            parts.append(f"label {key} {la.get(key, '(none)')} → {lb.get(key, '(none)')}")
    budget = [format_size(x) if x is not None else "none" for x in (a.memory_budget, b.memory_budget)]
    if budget[0] != budget[1]:
        parts.append(f"memory_budget {budget[0]} → {budget[1]}")
    ports = [str(x) if x is not None else "any" for x in (a.allowed_ports, b.allowed_ports)]
    if ports[0] != ports[1]:
        parts.append(f"allowed_ports {ports[0]} → {ports[1]}")
    return ", ".join(parts)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "forever" if value < 0 else format_duration(value)


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
