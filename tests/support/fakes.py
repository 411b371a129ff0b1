"""Stand-ins for the shell's parts, shared by tests (and their contract with the real thing).

* scripted pass results (``desired``, ``good``, ``bad``, ``keep``) and ``FakePasses``, a
  stand-in for ``loop.apply_pass``: in-process tests of the daemon, logs and metrics;
* ``FakeNvml``: an ``NvmlReader`` (``world/devices.py``) of two GPUs, one process on the
  first; ``tests/support/test_contracts.py`` holds it and the real NVML to one contract.
"""

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
)
from reconciler.core.observed import Health, Observed, ProbeFacts, RoleObservation
from tests.support import worlds


def role_spec(name: str, port: int = 20001, mode: Mode = Mode.MANAGED) -> RoleSpec:
    return worlds.role(name, port, mode=mode, model="tiny", memory=MemorySpec(weights=1000, kv=24))


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


GIB = 2**30


class FakeNvml:
    """An ``NvmlReader`` of two RTX A5000s: pid 4242 uses 3 GiB of the first, pid 4243 an
    amount NVML does not know (``None``, as for a process of another container)."""

    def devices(self):
        return [("NVIDIA RTX A5000", "GPU-a", "00000000:81:00.0", 24 * GIB, 3 * GIB),
                ("NVIDIA RTX A5000", "GPU-b", "00000000:C1:00.0", 24 * GIB, 0)]

    def processes(self, index):
        return [(4242, 3 * GIB), (4243, None)] if index == 0 else []
