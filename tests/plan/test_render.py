"""Rendering a Plan: the Terraform-like text diff and the JSON form."""

from __future__ import annotations

import json

from reconciler import render
from reconciler.decisions import ACTING_VERBS, Decision, Plan, Reason, Status, Verb

FIELDS = {
    "role", "verb", "reason", "why", "acts", "status", "detail", "runtime", "port", "pid",
    "instance_id", "launch", "model_tag", "keep_alive", "reserve", "release", "retry_in",
    "restarts",
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
    d = Decision(role="coder", verb=Verb.WAIT, reason=Reason.BACKOFF, why="retry in 8s",
                 status=Status.BACKOFF, port=8090, retry_in=8.0)
    assert render.line(d) == "… wait coder :8090 (backoff: retry in 8s)"


def test_summary_counts_each_acting_verb() -> None:
    """The summary counts starts, restarts, stops, loads and unloads separately."""
    plan = Plan(decisions=(
        Decision(role="a", verb=Verb.START, reason=Reason.MISSING, port=1),
        Decision(role="b", verb=Verb.STOP, reason=Reason.REMOVED, port=2),
        Decision(role="c", verb=Verb.UNLOAD, reason=Reason.REMOVED, model_tag="x:1"),
        Decision(role="d", verb=Verb.KEEP, reason=Reason.IN_SYNC),
        Decision(role="e", verb=Verb.GIVE_UP, reason=Reason.MAX_RESTARTS, status=Status.GAVE_UP),
    ))
    assert render.summary(plan) == (
        "Plan: 1 to start, 0 to restart, 1 to stop, 0 to load, 1 to unload; 2 unchanged. "
        "1 needs an operator."
    )


def test_json_has_stable_field_names_and_serialises() -> None:
    """as_json uses the documented field names and plain JSON types."""
    plan = Plan(decisions=(
        Decision(role="a", verb=Verb.START, reason=Reason.MISSING, port=8090, reserve=5),
    ), requeue_after=1.0)
    data = json.loads(json.dumps(render.as_json(plan)))
    assert set(data) == {"format", "changes", "requeue_after", "summary", "decisions"}
    assert set(data["decisions"][0]) == FIELDS
    assert data["decisions"][0]["verb"] == "start" and data["changes"] == 1
    assert set(data["summary"]) == {"start", "restart", "stop", "load", "unload", "unchanged",
                                    "needs_operator"}


def test_json_never_carries_environment_values() -> None:
    """Launch env values (which may hold secrets) are withheld; only names are shown."""
    from reconciler.desired import Launch

    launch = Launch(argv=("/bin/x",), env=(("TOKEN", "s3cret"),), cwd="/d", run_as=None, digest="0")
    d = Decision(role="a", verb=Verb.START, reason=Reason.MISSING, launch=launch)
    out = json.dumps(render.as_json(Plan(decisions=(d,))))
    assert "s3cret" not in out and "TOKEN" in out
