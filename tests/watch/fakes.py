"""Scripted pass results for in-process tests of the daemon, logs and metrics."""

from __future__ import annotations

import attrs

from reconciler.core.errors import Problem
from reconciler.engine.loop import PassInputs, PassResult
from reconciler.core.decisions import Decision, Plan, Reason, Status, Verb, flat
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
    NodeConfig,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Health, Observed, ProbeFacts, RoleObservation


def role_spec(name: str, port: int = 20001, mode: Mode = Mode.MANAGED) -> RoleSpec:
    return RoleSpec(name=name, runtime=Runtime.LLAMACPP, mode=mode, model="tiny",
                    serve=ServeSpec(port=port), memory=MemorySpec(weights=1000, kv=24))


def desired(*names: str, budget: int | None = None) -> Desired:
    return Desired(roles=tuple(role_spec(n, 20000 + i) for i, n in enumerate(names)),
                   node=NodeConfig(name="test-node", memory_budget=budget))


def keep(name: str, **kw) -> Decision:
    return flat(role=name, verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING,
                    detail="healthy", **kw)


def good(d: Desired, *decisions: Decision, requeue_after: float | None = None,
         latency: float | None = None) -> PassResult:
    decisions = decisions or tuple(keep(r.name) for r in d.roles)
    observed = Observed(roles=tuple(
        RoleObservation(name=r.name, probe=ProbeFacts(health=Health.UP, latency=latency))
        for r in d.roles))
    return PassResult(desired=d, observed=observed,
                      plan=Plan(decisions=decisions, requeue_after=requeue_after),
                      started=1_700_000_000.0, duration=0.25)


def bad(*messages: str) -> PassResult:
    return PassResult(problems=tuple(
        Problem(file="m/chat.yaml", line=i + 3, path="$.spec.serve.port", message=m)
        for i, m in enumerate(messages)), started=1_700_000_000.0)


class FakePasses:
    """A stand-in for ``loop.apply_pass``: returns scripted results, records every call."""

    def __init__(self, *results: PassResult) -> None:
        self.script = list(results)
        self.calls: list[PassInputs] = []
        self.last: PassResult | None = None

    def __call__(self, inputs: PassInputs) -> PassResult:
        self.calls.append(inputs)
        override = inputs.desired
        if override is not None:
            return good(override)
        if self.script:
            self.last = self.script.pop(0)
        assert self.last is not None, "no scripted result"
        return self.last


def evolve(value, **kw):
    return attrs.evolve(value, **kw)
