"""Every node's turn in each rollout: ``reconcile fleet --rollout`` (PURE; BEHAVIOUR §13).

``view(fleet, at, gates)`` works out, for every Rollout of the set, its waves in
order and, per wave, each node that runs a role the rollout stages: when it moves
(``planner/rollout.place``) and whether it has by ``at`` (``turn``), with the
reason the node's plan would give. ``gates`` holds what the gates answered, by
(rollout, wave); a wave nobody asked about (offline: a CI job) reads "gate
unknown: not asked (offline)" and its nodes hold, as a node would.
``questions`` says what to ask each gate: the nodes of the earlier waves.

Text::

    Rollout coders: 14:00Z → 17:00Z (3h), 2 roles (big-coder, small-coder), at 15:10Z
      gate: prometheus http://prometheus.internal:9090, bake 15m
      wave canary  opens 14:00Z  1 node, 1 moved
        gpu-2  14:00Z  moved
      wave rest  opens 15:30Z  2 nodes, 0 moved  gate unknown: not asked (offline)
        gpu-1  16:12:09Z  waits: wave canary first; this node moves at 16:12:09Z

JSON (``as_json``, stable field names)::

    {"format": 1, "at": float,
     "rollouts": [{"rollout", "start", "end", "paused": bool, "roles": [str]|null,
                   "gate": {"url", "query", "bake"}|null,
                   "waves": [{"wave", "opens": float, "canary": bool,
                              "gate": {"open": bool|null, "reason"}|null,
                              "nodes": [{"node", "at": float, "moves": bool,
                                         "why", "reason", "roles": [str]}]}]}]}
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from reconciler.core.rollouts import Rollout
from reconciler.core.units import format_duration
from reconciler.manifests import fleet as fleets
from reconciler.manifests.fleet import Fleet
from reconciler.planner import rollout as schedule
from reconciler.planner.rollout import NOT_ASKED, GateAnswer, Turn

frozen = attrs.frozen(kw_only=True)


@frozen
class NodeTurn:
    node: str
    turn: Turn
    roles: tuple[str, ...]  # the roles of this rollout placed on the node


@frozen
class WaveView:
    index: int
    name: str
    opens: float
    canary: bool
    gate: GateAnswer | None  # None: no gate applies (the first wave, or none declared)
    nodes: tuple[NodeTurn, ...]  # by moment, then name


@frozen
class RolloutView:
    rollout: Rollout
    waves: tuple[WaveView, ...]


@frozen
class FleetRollouts:
    at: float
    rollouts: tuple[RolloutView, ...]


def view(whole: Fleet, at: float, gates: Mapping[tuple[str, str], GateAnswer] | None = None,
         *, implicit: str = "") -> FleetRollouts:
    """Every rollout's waves and every node's turn at ``at`` (unix seconds)."""
    answers = gates or {}
    nodes = fleets.members(whole, implicit)
    placed = fleets.placements(whole.roles, nodes)
    on_node: dict[str, list[str]] = {n.name: [] for n in nodes}
    for role, names in placed.items():
        for name in names:
            on_node[name].append(role)
    out = []
    for rollout in whole.rollouts:
        mine = {w: [a for (r, w), a in answers.items() if r == rollout.name]
                for w in (wave.name for wave in rollout.all_waves)}
        wave_gates = {w: got[0] for w, got in mine.items() if got}
        waves: list[list[NodeTurn]] = [[] for _ in rollout.all_waves]
        for node in nodes:
            staged = tuple(sorted(r for r in on_node[node.name] if rollout.covers(r)))
            if not staged:
                continue
            turn = schedule.turn(rollout, node.name, dict(node.labels), at, wave_gates)
            waves[turn.place.wave].append(NodeTurn(node=node.name, turn=turn, roles=staged))
        width = rollout.duration / len(rollout.all_waves)
        out.append(RolloutView(rollout=rollout, waves=tuple(
            WaveView(index=i, name=wave.name, opens=rollout.start + i * width, canary=wave.canary,
                     gate=(wave_gates.get(wave.name, NOT_ASKED)
                           if i > 0 and rollout.gate is not None else None),
                     nodes=tuple(sorted(waves[i], key=lambda t: (t.turn.place.at, t.node))))
            for i, wave in enumerate(rollout.all_waves))))
    return FleetRollouts(at=at, rollouts=tuple(out))


def questions(whole: Fleet, *, implicit: str = "") -> list[tuple[Rollout, str, tuple[str, ...]]]:
    """What to ask the gates: (rollout, wave, the nodes of the earlier waves that run a role
    it stages) for each wave after the first of each gated rollout. A node with no staged
    role reports nothing about the revision, so it is not asked about."""
    shown = view(whole, 0.0, implicit=implicit)
    out = []
    for rv in shown.rollouts:
        if rv.rollout.gate is None:
            continue
        before: list[str] = []
        for wave in rv.waves:
            if wave.index > 0:
                out.append((rv.rollout, wave.name, tuple(sorted(before))))
            before += [t.node for t in wave.nodes]
    return out


def text(shown: FleetRollouts) -> str:
    at = shown.at
    lines: list[str] = []
    for rv in shown.rollouts:
        r = rv.rollout
        roles = "every role" if r.roles is None else (
            f"{len(r.roles)} role{'s' if len(r.roles) != 1 else ''} "
            f"({fleets.names(sorted(r.roles))})")
        lines.append(f"Rollout {r.name}: {schedule.clock(r.start, at)} → {schedule.clock(r.end, at)}"
                     f" ({format_duration(r.duration)}), {roles}, at {schedule.clock(at, at)}"
                     + ("  PAUSED" if r.paused else ""))
        if r.gate is not None:
            bake = f", bake {format_duration(r.gate.bake)}" if r.gate.bake else ""
            lines.append(f"  gate: prometheus {r.gate.url}{bake}")
        for wave in rv.waves:
            moved = sum(t.turn.moves for t in wave.nodes)
            count = len(wave.nodes)
            canary = " (canary)" if wave.canary and wave.name != "canary" else ""
            head = (f"  wave {wave.name}{canary}  opens "
                    f"{schedule.clock(wave.opens, at)}  {count} node{'' if count == 1 else 's'}, "
                    f"{moved} moved")
            if wave.gate is not None:
                state = {True: "open", False: "closed", None: "unknown"}[wave.gate.open]
                head += f"  gate {state}: {wave.gate.reason}"
            lines.append(head)
            for t in wave.nodes:
                what = "moved" if t.turn.moves else f"waits: {t.turn.reason}"
                lines.append(f"    {t.node}  {schedule.clock(t.turn.place.at, at)}  {what}")
    if not shown.rollouts:
        lines.append("No Rollout document: every change reaches every node at its next pass.")
    return "\n".join(lines) + "\n"


def as_json(shown: FleetRollouts) -> dict[str, Any]:
    return {"format": 1, "at": shown.at, "rollouts": [_rollout_json(rv) for rv in shown.rollouts]}


def _rollout_json(rv: RolloutView) -> dict[str, Any]:
    r = rv.rollout
    return {
        "rollout": r.name, "start": r.start, "end": r.end, "paused": r.paused,
        "roles": sorted(r.roles) if r.roles is not None else None,
        "gate": ({"url": r.gate.url, "query": r.gate.query, "bake": r.gate.bake}
                 if r.gate is not None else None),
        "waves": [{
            "wave": w.name, "opens": w.opens, "canary": w.canary,
            "gate": {"open": w.gate.open, "reason": w.gate.reason} if w.gate is not None else None,
            "nodes": [{"node": t.node, "at": t.turn.place.at, "moves": t.turn.moves,
                       "why": str(t.turn.why), "reason": t.turn.reason, "roles": list(t.roles)}
                      for t in w.nodes],
        } for w in rv.waves],
    }
