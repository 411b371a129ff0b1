"""Rendering a Plan: the Terraform-like text diff and the JSON form."""

from __future__ import annotations

import json

from reconciler.planner import render
from reconciler.core.decisions import ACTING_VERBS, Decision, Plan, Reason, Status, Verb, flat

FIELDS = {
    "role", "verb", "reason", "why", "acts", "status", "detail", "runtime", "port", "pid",
    "instance_id", "launch", "model_tag", "keep_alive", "reserve", "release", "retry_in",
    "restarts", "devices",
}


def test_every_verb_has_a_distinct_symbol_for_actions() -> None:
    """Each verb renders with a symbol; acting verbs never share one."""
    assert set(render.SYMBOLS) == set(Verb)
    acting = [render.SYMBOLS[v] for v in ACTING_VERBS]
    assert len(acting) == len(set(acting))


def test_empty_plan_says_no_changes() -> None:
    """A plan without decisions renders only the summary."""
    assert render.text(Plan()) == "No changes. 0 unchanged.\n"


def test_wait_line_shows_retry_in() -> None:
    """A backoff wait reads `… wait coder :8090 (backoff: retry in 8s)`."""
    d = flat(role="coder", verb=Verb.WAIT, reason=Reason.BACKOFF, why="retry in 8s",
                 status=Status.BACKOFF, port=8090, retry_in=8.0)
    assert render.line(d) == "… wait coder :8090 (backoff: retry in 8s)"


def test_summary_counts_each_acting_verb() -> None:
    """The summary counts starts, restarts, stops, loads and unloads separately."""
    plan = Plan(decisions=(
        flat(role="a", verb=Verb.START, reason=Reason.MISSING, port=1),
        flat(role="b", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED, port=2),
        flat(role="c", verb=Verb.UNLOAD, reason=Reason.REMOVED, model_tag="x:1"),
        flat(role="d", verb=Verb.KEEP, reason=Reason.IN_SYNC),
        flat(role="e", verb=Verb.GIVE_UP, reason=Reason.MAX_RESTARTS, status=Status.GAVE_UP),
    ))
    assert render.summary(plan) == (
        "Plan: 1 to start, 0 to restart, 1 to stop, 0 to load, 1 to unload; 2 unchanged. "
        "1 needs an operator."
    )


def test_json_has_stable_field_names_and_serialises() -> None:
    """as_json uses the documented field names and plain JSON types."""
    plan = Plan(decisions=(
        flat(role="a", verb=Verb.START, reason=Reason.MISSING, port=8090, reserve=5),
    ), requeue_after=1.0)
    data = json.loads(json.dumps(render.as_json(plan)))
    assert set(data) == {"format", "changes", "requeue_after", "summary", "decisions", "fetches"}
    assert set(data["decisions"][0]) == FIELDS
    assert data["decisions"][0]["verb"] == "start" and data["changes"] == 1
    assert set(data["summary"]) == {"start", "restart", "stop", "load", "unload", "unchanged",
                                    "needs_operator", "fetch"}


def test_a_fetch_is_a_line_of_its_own_and_counted() -> None:
    """§1.6 ``> fetch qwen 4.4 GB (missing on this node; 38.0 GB free)``, after the roles."""
    from reconciler.core.decisions import Fetch

    plan = Plan(decisions=(
        flat(role="coder", verb=Verb.WAIT, reason=Reason.FETCHING, port=8090,
                 status=Status.FETCHING, why="fetching qwen: starting"),
    ), fetches=(Fetch(model="qwen", generation="g", bytes=4_400_000_000, free=38 * 10**9,
                      why="missing on this node; 38.0 GB free"),))
    lines = render.text(plan).splitlines()
    assert lines[0] == "… wait coder :8090 (fetching: fetching qwen: starting)"
    assert lines[1] == "> fetch qwen 4.4 GB (missing on this node; 38.0 GB free)"
    assert lines[-1] == "Plan: 1 to fetch; 1 unchanged."
    assert render.as_json(plan)["fetches"][0]["bytes"] == 4_400_000_000


def test_json_never_carries_environment_values() -> None:
    """Launch env values (which may hold secrets) are withheld; only names are shown."""
    from reconciler.core.desired import Launch

    launch = Launch(argv=("/bin/x",), env=(("TOKEN", "s3cret"),), cwd="/d", run_as=None, digest="0")
    d = flat(role="a", verb=Verb.START, reason=Reason.MISSING, launch=launch)
    out = json.dumps(render.as_json(Plan(decisions=(d,))))
    assert "s3cret" not in out and "TOKEN" in out


def test_json_carries_the_values_an_operator_acts_on() -> None:
    """changes, requeue_after, and each decision's pid and retry_in are the plan's own values."""
    plan = Plan(decisions=(
        flat(role="a", verb=Verb.STOP, reason=Reason.REMOVED, port=8090, pid=4242,
             create_time=1.0),
        flat(role="b", verb=Verb.WAIT, reason=Reason.BACKOFF, port=8091, retry_in=8.0),
        flat(role="c", verb=Verb.KEEP, reason=Reason.IN_SYNC, port=8092),
    ), requeue_after=8.0)
    data = render.as_json(plan)
    assert (data["changes"], data["requeue_after"]) == (1, 8.0)
    by_role = {d["role"]: d for d in data["decisions"]}
    assert (by_role["a"]["pid"], by_role["b"]["retry_in"], by_role["c"]["retry_in"]) == (
        4242, 8.0, None)


def test_every_status_that_needs_an_operator_is_counted() -> None:
    """gave-up, stopped-exposed, unplaceable and refused need an operator (exit 3); the rest do not."""
    needs = {Status.GAVE_UP, Status.STOPPED_EXPOSED, Status.UNPLACEABLE, Status.REFUSED}
    for status in Status:
        d = flat(role="a", verb=Verb.KEEP, reason=Reason.IN_SYNC, status=status)
        assert render.counts(Plan(decisions=(d,)))["needs_operator"] == (status in needs), status


def test_a_decision_is_found_by_its_exact_role() -> None:
    """Plan.decision names one role exactly, never one whose name merely starts the same."""
    plan = Plan(decisions=(flat(role="coder-2", verb=Verb.KEEP, reason=Reason.IN_SYNC),
                           flat(role="coder", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED)))
    found = plan.decision("coder")
    assert found is not None and found.verb is Verb.STOP
    assert plan.decision("code") is None


def test_json_release_is_the_bytes_released_not_the_reservation() -> None:
    """Rule: plan --json `release` is what the decision frees and `reserve` what it claims,
    each its own figure (a restart that releases 4 GB and reserves 6 GB says both)."""
    d = flat(role="a", verb=Verb.RESTART, reason=Reason.SPEC_CHANGED, port=8090,
                 reserve=6_000_000_000, release=4_000_000_000)
    [out] = render.as_json(Plan(decisions=(d,)))["decisions"]
    assert (out["release"], out["reserve"]) == (4_000_000_000, 6_000_000_000)


def test_give_up_is_drawn_with_a_bang() -> None:
    """Rule: a give-up line is drawn `!` like a refusal: it needs an operator."""
    d = flat(role="coder", verb=Verb.GIVE_UP, reason=Reason.MAX_RESTARTS,
                 status=Status.GAVE_UP, port=8090)
    assert render.line(d).startswith("! give-up coder :8090")
