"""A ``kind: Rollout`` document as values: when and in what order a fleet takes a change (PURE; §13).

A Rollout stages the changes of the roles it covers (``roles``; None: every
role) over a window of ``duration`` seconds from ``start`` (unix seconds, from
an explicit RFC 3339 time: commit times are rewritten by rebases). Nodes move
in ``waves`` (the first may be a canary wave); a node no wave's selector
admits is in the implicit last wave, ``rest``. A later wave opens only when
its ``gate`` says the earlier ones are healthy. ``paused`` freezes every node
where it stands. The schedule itself is ``planner/rollout.py``.
"""

from __future__ import annotations

import attrs

from reconciler.core.desired import SourceRef
from reconciler.core.instances import group_of
from reconciler.core.labels import Selector

frozen = attrs.frozen(kw_only=True)

#: A node label placing the node within its wave: a decimal from 0 (first) to 1 (last);
#: without it the place is a stable hash of the node's name.
POSITION_LABEL = "reconciler.io/rollout-position"

#: The implicit last wave: the nodes no declared wave admits.
REST = "rest"


@frozen
class Wave:
    """One step of a rollout: the nodes its selector admits (first matching wave wins)."""

    name: str
    selector: Selector = Selector()  # no requirement: every node not in an earlier wave
    canary: bool = False  # every node of a canary wave moves when the wave opens


@frozen
class PrometheusGate:
    """``gate.prometheus``: a PromQL instant query that must hold for ``bake`` seconds.

    ``query`` may name ``$revision`` (the commit being rolled out), ``$wave`` (the
    wave asking to open) and ``$nodes`` (a regex of the nodes of the earlier waves);
    the gate substitutes them before it asks.
    """

    url: str
    query: str
    bake: float = 0.0


@frozen
class Rollout:
    name: str
    start: float  # unix seconds
    duration: float  # seconds: the window over which every wave moves
    waves: tuple[Wave, ...] = ()  # declared order; ``rest`` is added by ``all_waves``
    roles: frozenset[str] | None = None  # the roles it stages; None: every role
    paused: bool = False
    gate: PrometheusGate | None = None
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    def covers(self, role: str) -> bool:
        """Does it stage ``role`` — a role it names, or an instance of one (§12 ``chat/1``)?"""
        return self.roles is None or role in self.roles or group_of(role) in self.roles

    @property
    def all_waves(self) -> tuple[Wave, ...]:
        """The declared waves, then ``rest`` unless the last declared wave admits every node."""
        if self.waves and not self.waves[-1].selector.requirements:
            return self.waves
        return (*self.waves, Wave(name=REST))

    @property
    def end(self) -> float:
        return self.start + self.duration
