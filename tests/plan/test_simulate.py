"""The simulator behaves as the executor: what the planner's properties lean on (test helper's test)."""

from __future__ import annotations

import yaml

from reconciler.core.decisions import Verb
from reconciler.planner.plan import plan
from tests.plan import golden
from tests.plan.simulate import simulate

_WORLD = yaml.safe_load("""
node: {memory_budget: 40GB}
roles:
  old: {port: 8090, state: stopped, memory: {weights: 30GB}}
  new: {port: 8091, memory: {weights: 20GB}}
observed:
  roles:
    old: {pid: 100, health: up}
remembered:
  old: {pid: 100, reserved: 30GB}
expect: {}
""")


def test_a_claim_after_a_failed_stop_is_skipped_as_the_executor_skips_it() -> None:
    """Rule (world/execute.apply, §7): once a stop did not free its memory, every later start
    that reserves memory is skipped — not started — so the store never records more than the
    budget (the simulator used to start it: 50 GB recorded against 40 GB)."""
    [s] = golden.steps(_WORLD, "failed-stop")
    p = plan(s.desired, s.observed, s.remembered, s.ctx, s.now)
    assert [(d.role, d.verb) for d in p.changes] == [("old", Verb.STOP), ("new", Verb.START)]
    observed, remembered = simulate(p, s.desired, s.observed, s.remembered, s.now,
                                    failing=frozenset({"old"}))
    new = observed.role("new")
    assert new is None or new.process is None
    assert sum(r.reserved for r in remembered.roles) <= s.desired.node.memory_budget
    # Without the failure, the start happens.
    observed, remembered = simulate(p, s.desired, s.observed, s.remembered, s.now)
    assert observed.role("new").process is not None
