"""Golden plan cases, read from tests/plan/golden/*.yaml (see golden.py for the shape)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.planner import render
from reconciler.core.decisions import ACTING_VERBS, Decision, Verb
from reconciler.planner.plan import plan
from tests.plan import golden
from tests.plan.golden import size

CASES = golden.load_all()
STEPS = [s for name, case in CASES.items() for s in golden.steps(case, name)]

#: Every rule of BEHAVIOUR §3–§7 the ladder has, as (verb, reason): each must
#: appear in at least one golden case.
RULES = {
    ("start", "missing"), ("restart", "spec_changed"), ("restart", "crashed"),
    ("stop", "state_stopped"), ("stop", "removed"), ("stop", "exposed"),
    ("load", "missing"), ("load", "evicted"), ("unload", "removed"),
    ("unload", "state_stopped"), ("unload", "spec_changed"),
    ("keep", "in_sync"), ("keep", "loading"), ("keep", "starting"), ("keep", "unhealthy"),
    ("keep", "unknown"), ("keep", "terminal"), ("keep", "empty_manifests"), ("keep", "adopted"),
    ("keep", "absent"), ("wait", "backoff"), ("give-up", "max_restarts"),
    ("refuse", "port_taken"), ("refuse", "port_not_allowed"), ("refuse", "model_unverified"),
    ("refuse", "not_pulled"), ("refuse", "unplaceable"), ("refuse", "excluded"),
    ("forget", "removed"), ("forget", "state_stopped"),
    # §9 on-demand roles
    ("start", "demand"), ("stop", "idle"), ("stop", "evicted"), ("keep", "on_demand"),
    ("stop", "orphan"), ("stop", "startup_timeout"), ("start", "spec_changed"),
    # §12 instances
    ("start", "scale_up"), ("stop", "scale_down"), ("wait", "rolling_update"),
}

_SIZE_FIELDS = {"reserve", "release"}


def _value(d: Decision, field: str) -> Any:
    value = getattr(d, field)
    if field == "devices":  # §7.1 {cuda:0: 12GB} in the YAML
        return dict(value)
    return str(value) if hasattr(value, "value") else value


def _expected(field: str, value: Any) -> Any:
    if field == "devices":
        return {k: size(v) for k, v in value.items()}
    return size(value) if field in _SIZE_FIELDS and isinstance(value, str) else value


@pytest.mark.parametrize("step", STEPS, ids=[s.label for s in STEPS])
def test_golden_case(step: golden.Step) -> None:
    """Each golden step plans exactly the decisions its YAML expects."""
    result = plan(step.desired, step.observed, step.remembered, step.ctx, step.now)
    expect = step.data["expect"]
    assert sorted(d.role for d in result.decisions) == sorted(expect), "one decision per role"
    for role, fields in expect.items():
        d = result.decision(role)
        assert d is not None
        got = {f: _value(d, f) for f in fields}
        want = {f: _expected(f, v) for f, v in fields.items()}
        assert got == want, f"{role}: {d}"
    if "order" in step.data:
        assert [d.role for d in result.decisions] == step.data["order"]
    if "requeue_after" in step.data:
        assert result.requeue_after == step.data["requeue_after"]
    if "text" in step.data:
        assert render.text(result) == step.data["text"]


def _acts(case: dict[str, Any]) -> bool:
    parts = case.get("steps") or [case]
    return any(f.get("verb") in {str(v) for v in ACTING_VERBS}
               for p in parts for f in (p.get("expect") or {}).values())


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if _acts(c)])
def test_acting_case_has_a_quiet_twin(name: str) -> None:
    """Every case that does something names a twin that does nothing."""
    twin = CASES[name].get("twin")
    assert twin in CASES, f"{name}: twin {twin!r} missing"
    assert not _acts(CASES[twin]), f"{name}: twin {twin} acts"


def test_every_case_is_described() -> None:
    """Each golden file says in one line what it pins."""
    assert all(isinstance(c.get("description"), str) and c["description"] for c in CASES.values())


def test_every_rule_has_a_golden_case() -> None:
    """The golden cases together exercise every rung of the decision ladder."""
    seen = set()
    for case in CASES.values():
        for part in case.get("steps") or [case]:
            for fields in (part.get("expect") or {}).values():
                seen.add((fields.get("verb"), fields.get("reason")))
    assert RULES - seen == set()


def test_verbs_are_known() -> None:
    """Golden files only use verbs the model defines (typos would never match)."""
    verbs = {str(v) for v in Verb}
    for case in CASES.values():
        for part in case.get("steps") or [case]:
            for fields in (part.get("expect") or {}).values():
                assert fields.get("verb") in verbs
