"""§13 a rollout's gate: what it asks, and how an answer reads (PURE).

A gate answers one question per wave: are the earlier waves healthy on the new
revision? ``Gate`` is the protocol a gate implements (``world/gate.py`` asks a
Prometheus server); this module holds what is pure about the Prometheus one:

* ``query``: the document's PromQL with ``$revision`` (the commit being rolled
  out), ``$wave`` (the wave asking to open), ``$nodes`` (an anchored regex of
  the nodes of the earlier waves) and ``$count`` (how many they are)
  substituted; with a ``bake`` the expression must have held for that long:
  ``min_over_time`` of it over the bake, times 0 unless it had a value at every
  step of the bake (a series that appeared a minute ago has not baked).
* ``read``: a ``/api/v1/query`` answer → ``GateAnswer``. Open only when the
  status is ``success``, the result an instant vector with at least one sample
  and every sample's value a number other than 0. An empty result, a scalar, a
  0, a NaN, an error: hold, with the reason. Unknown is never go.
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol, Sequence

from reconciler.core.rollouts import PrometheusGate, Rollout
from reconciler.planner.rollout import GateAnswer

#: The bake is checked by a subquery over it:
BAKE_POINTS = 20  # the bake is read at this many points (at most one a second)
MIN_STEP = 1.0  # seconds: a finer step reads the same samples again


class Gate(Protocol):
    """Asks whether ``wave`` of ``rollout`` may open (the earlier waves are healthy)."""

    def ask(self, rollout: Rollout, wave: str, *, revision: str,
            nodes: Sequence[str]) -> GateAnswer: ...


def nodes_regex(nodes: Sequence[str]) -> str:
    """A PromQL (RE2, fully anchored) regex matching exactly these node names."""
    if not nodes:
        return "$^"  # matches no label value, not even the empty one
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", n) for n in sorted(nodes))


def query(gate: PrometheusGate, wave: str, *, revision: str, nodes: Sequence[str]) -> str:
    """The PromQL the gate sends for ``wave``."""
    text = (gate.query.replace("$revision", revision).replace("$wave", wave)
            .replace("$nodes", nodes_regex(nodes)).replace("$count", str(len(nodes))))
    if gate.bake <= 0:
        return text
    step = max(MIN_STEP, gate.bake / BAKE_POINTS)
    points = int(gate.bake // step)
    window = f"[{_seconds(gate.bake)}:{_seconds(step)}]"
    return (f"min_over_time(({text}){window})"
            f" * (count_over_time(({text}){window}) >= bool {points})")


def _seconds(value: float) -> str:
    return f"{int(value)}s" if value == int(value) else f"{int(value * 1000)}ms"


def read(status: int | None, body: Any, error: str = "") -> GateAnswer:
    """A Prometheus HTTP API answer (its status and parsed JSON body) → the gate's answer."""
    if status is None:
        return GateAnswer(open=None, reason=f"Prometheus unreachable: {error or 'no answer'}")
    if not isinstance(body, dict):
        return GateAnswer(open=None, reason=f"Prometheus answered HTTP {status} without JSON")
    if body.get("status") != "success":
        what = body.get("error") or f"HTTP {status}"
        return GateAnswer(open=None, reason=f"query failed: {str(what)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, dict) else None
        return GateAnswer(open=None, reason=f"the query must give an instant vector, not {kind}")
    result = data.get("result")
    if not isinstance(result, list) or not result:
        return GateAnswer(open=False, reason="the query gave no sample (no node reported yet?)")
    bad: list[str] = []
    for sample in result:
        value = _value(sample)
        if value is None or value == 0:
            labels = sample.get("metric") if isinstance(sample, dict) else None
            bad.append(_series(labels) + f" = {value if value is not None else '?'}")
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        return GateAnswer(open=False, reason=f"{len(bad)} of {len(result)} samples not healthy: "
                          + ", ".join(bad[:3]) + more)
    return GateAnswer(open=True, reason=f"{len(result)} sample{'s' if len(result) != 1 else ''}"
                      " healthy")


def _value(sample: Any) -> float | None:
    try:
        number = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _series(labels: Any) -> str:
    if not isinstance(labels, dict) or not labels:
        return "{}"
    return "{" + ",".join(f"{k}={v!r}" for k, v in sorted(labels.items())) + "}"
