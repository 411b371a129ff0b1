"""A ``kind: Rollout`` document → ``Rollout``, and the checks across rollouts (PURE; §13).

The schema has fixed the keys and types; here: ``start`` read as an RFC 3339
time with its offset (a time without one means a different instant on every
node's clock, so it is refused), ``duration`` and ``bake`` as seconds, the
waves' selectors checked as a placement's are (``labels.py``), and only the
first wave a canary. ``check`` looks across documents: a role staged by two
rollouts is an error (which window would it follow?); a role no InferenceSpec
declares, a wave that admits no node and a node whose
``reconciler.io/rollout-position`` label is not a decimal from 0 to 1 are
warnings.
"""

from __future__ import annotations

import datetime
import re
from typing import Sequence

from reconciler.core.desired import NodeConfig
from reconciler.core.errors import Problem, json_path
from reconciler.core.rollouts import POSITION_LABEL, PrometheusGate, Rollout, Wave
from reconciler.manifests.documents import _Reader, selector_at
from reconciler.manifests.yamlsafe import Document

_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$")


def parse_time(text: str) -> float:
    """Unix seconds of an RFC 3339 time (``2026-12-02T14:00:00Z``); ValueError otherwise."""
    if not _RFC3339.match(text):
        raise ValueError(f"{text!r} is not an RFC 3339 time with its offset "
                         "(like '2026-12-02T14:00:00Z' or '2026-12-02T15:00:00+01:00')")
    normal = text.upper().replace(" ", "T")
    head, dot, tail = normal.partition(".")
    if dot:  # fromisoformat reads at most microseconds
        digits = re.match(r"[0-9]+", tail).group(0)
        normal = f"{head}.{digits[:6].ljust(6, '0')}{tail[len(digits):]}"
    try:
        return datetime.datetime.fromisoformat(normal.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a valid time (a day or hour out of range)") from None


def rollout_spec(doc: Document) -> tuple[Rollout | None, list[Problem]]:
    r = _Reader(doc)
    start = r.parsed(("spec", "start"), parse_time)
    duration = r.duration("spec", "duration")
    if duration == 0:
        r.add(("spec", "duration"), "must be more than 0 seconds: the window the waves move over")
    waves: list[Wave] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(r.get("spec", "waves") or ()):
        here = ("spec", "waves", i)
        name = raw["name"]
        if name in seen:
            r.add(here + ("name",), f"duplicate wave name {name!r} (also wave {seen[name]})")
        seen.setdefault(name, i)
        if name == "rest" and i != len(r.get("spec", "waves")) - 1:
            r.add(here + ("name",), "'rest' names the implicit last wave; "
                  "only the last declared wave may take it")
        canary = bool(raw.get("canary", False))
        if canary and i > 0:
            r.add(here + ("canary",), "only the first wave may be a canary wave")
        found = selector_at(r, here + ("node_selector",)) if "node_selector" in raw else None
        waves.append(Wave(name=name, canary=canary, **({"selector": found} if found is not None else {})))
    gate = None
    raw_gate = r.get("spec", "gate", "prometheus")
    if raw_gate is not None:
        bake = r.duration("spec", "gate", "prometheus", "bake")
        gate = PrometheusGate(url=raw_gate["url"].rstrip("/"), query=raw_gate["query"],
                              bake=bake or 0.0)
    roles = r.get("spec", "roles")
    if r.problems or start is None or duration is None:
        return None, r.problems
    return Rollout(name=str(r.get("metadata", "name")), start=start, duration=duration,
                   waves=tuple(waves), roles=frozenset(roles) if roles is not None else None,
                   paused=bool(r.get("spec", "paused")), gate=gate, ref=r.ref), []


def check(rollouts: Sequence[tuple[Rollout, Document]], roles: frozenset[str],
          nodes: Sequence[NodeConfig]) -> tuple[list[Problem], list[Problem]]:
    """Problems and warnings across the Rollout documents, the roles and the nodes."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    owner: dict[str, tuple[str, Document]] = {}
    for rollout, doc in rollouts:
        names = sorted(rollout.roles) if rollout.roles is not None else sorted(roles)
        path = ("spec", "roles") if rollout.roles is not None else ("spec",)
        for role in names:
            first = owner.setdefault(role, (rollout.name, doc))
            if first[1] is not doc:
                problems.append(doc.problem(path, f"role {role!r} is already staged by Rollout "
                                            f"{first[0]!r} ({first[1].file}:{first[1].line}); "
                                            "a role follows one rollout"))
        for role in sorted((rollout.roles or frozenset()) - roles):
            warnings.append(doc.problem(("spec", "roles"), f"no InferenceSpec is named {role!r}"))
        labels = [dict(n.labels) for n in nodes]
        for i, wave in enumerate(rollout.waves):
            if labels and wave.selector.requirements and not any(
                    wave.selector.matches(lab) for lab in labels):
                warnings.append(doc.problem(("spec", "waves", i, "node_selector"),
                                            f"wave {wave.name!r} admits no node ({wave.selector})"))
    if rollouts:
        for node in nodes:
            value = dict(node.labels).get(POSITION_LABEL)
            if value is not None and position_label(value) is None and node.ref is not None:
                warnings.append(Problem(
                    file=node.ref.file, line=node.ref.line, path=json_path(("metadata", "labels", POSITION_LABEL)),
                    message=f"{value!r} is not a decimal from 0 to 1: the node's place in its "
                            "wave is the hash of its name"))
    return problems, warnings


def position_label(value: str) -> float | None:
    """The value of a ``reconciler.io/rollout-position`` label, when it is one (0 to 1)."""
    if not re.fullmatch(r"[0-9]+([.][0-9]+)?", value):
        return None
    number = float(value)
    return number if 0.0 <= number <= 1.0 else None

