"""Which decisions are news for the event log (reconciler.events), over values only."""

from __future__ import annotations

import attrs
import pytest

from reconciler.core import events
from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.core.desired import Mode, Runtime
from reconciler.core.events import Event, EventKind
from reconciler.core.observed import RoleRecord, Terminal
from reconciler.core.observed import flat_record
from reconciler.core.outcomes import Guard, Outcome, Refusal

NOW = 1_700_000_000.0


def keep(**kw) -> Decision:
    values = dict(role="chat", verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING,
                  detail="healthy")
    values.update(kw)
    return flat(**values)


def record(**kw) -> RoleRecord:
    values = dict(name="chat", instance_id="chat-0123abcd", runtime=Runtime.LLAMACPP,
                  mode=Mode.MANAGED, pid=42, create_time=1.0)
    values.update(kw)
    return flat_record(**values)


def logged(decision: Decision, outcome: Outcome | None = None, *, before=None, after=None,
           last: Event | None = None, operator_started: bool = False) -> Event | None:
    before = before if before is not None else record()
    after = after if after is not None else before
    return events.for_decision(decision, outcome, before=before, after=after, last=last,
                               operator_started=operator_started, git_commit="abc", at=NOW)


def said(decision: Decision) -> Event:
    """The event a decision would write, as the role's last event."""
    event = logged(decision, last=None)
    assert event is not None
    return event


def test_a_repeated_decision_is_not_news():
    """The same keep as the role's last event writes nothing; the first one writes a line."""
    first = logged(keep())
    assert first == Event(role="chat", kind=EventKind.KEEP, reason="in_sync", detail="healthy",
                          ok=None, git_commit="abc", at=NOW)
    assert logged(keep(), last=first) is None


@pytest.mark.parametrize("change,expected", [
    ({"reason": Reason.UNHEALTHY}, ("keep", "unhealthy", "healthy")),
    ({"detail": "slow: 3 s"}, ("keep", "in_sync", "slow: 3 s")),
    ({"verb": Verb.WAIT, "reason": Reason.BACKOFF}, ("wait", "backoff", "healthy")),
])
def test_a_decision_that_says_something_new_is_logged(change, expected):
    """Another kind, reason or detail than the last event: logged."""
    event = logged(keep(**change), last=said(keep()))
    assert event is not None and (event.kind, event.reason, event.detail) == expected


def test_an_acting_decision_is_always_logged_with_its_outcome():
    """A start logs even when its last event read the same, with ok and what it did."""
    start = flat(role="chat", verb=Verb.START, reason=Reason.MISSING, why="not running")
    outcome = Outcome(role="chat", verb=Verb.START, ok=True, pid=77)
    first = logged(start, outcome)
    again = logged(start, outcome, last=first)
    assert again == first
    assert (again.kind, again.ok, again.detail) == (EventKind.START, True, "not running; pid 77")


def test_a_refused_or_skipped_action_is_logged_as_failed():
    """A refusal is not ok and says why; a skipped action is not ok either."""
    start = flat(role="chat", verb=Verb.START, reason=Reason.MISSING)
    refusal = Refusal(guard=Guard.MODEL_UNVERIFIED, detail="model m: shard a.gguf is missing")
    refused = logged(start, Outcome(role="chat", verb=Verb.START, ok=False, refusal=refusal))
    assert (refused.ok, refused.detail) == (False, "refused: model m: shard a.gguf is missing")
    skipped = logged(start, Outcome(role="chat", verb=Verb.START, ok=True, skipped=True,
                                    detail="an earlier stop failed"))
    assert (skipped.ok, skipped.detail) == (False, "skipped: an earlier stop failed")


def test_a_changed_status_is_logged_even_when_the_words_repeat():
    """A repeated wait is logged when the record's restarts, terminal state or liveness moved."""
    wait = keep(verb=Verb.WAIT, reason=Reason.BACKOFF, detail="backoff")
    last = said(wait)
    base = record(exited_at=10.0, restarts=1)
    assert logged(wait, before=base, after=base, last=last) is None
    for after in (attrs.evolve(base, restarts=2), attrs.evolve(base, terminal=Terminal.GAVE_UP),
                  attrs.evolve(base, exited_at=None)):
        assert logged(wait, before=base, after=after, last=last) is not None


def test_a_record_that_appears_or_goes_is_a_status_change():
    """Forgetting a role (no record after) or a first record is news."""
    assert events.status_changed(None, record()) and events.status_changed(record(), None)
    assert not events.status_changed(None, None)
    assert not events.status_changed(record(), record(healthy_since=5.0))  # not a status


def test_an_operator_start_always_gets_its_answer():
    """After `reconcile start`, the role's decision is logged even if it repeats ("keep")."""
    last = said(keep())
    assert logged(keep(), last=last) is None
    assert logged(keep(), last=last, operator_started=True) is not None


def test_every_plan_verb_has_an_event_kind_of_the_same_word():
    """EventKind.of covers every Verb, and the words in the log stay the verbs' words."""
    assert {str(EventKind.of(verb)) for verb in Verb} == {str(verb) for verb in Verb}


def test_the_other_kinds_keep_their_words():
    """Re-adoption, operator start and the manifests' validity read as they always have."""
    found = events.readopted(record(pid=9), at=NOW)
    assert (found.kind, found.reason, found.detail) == (
        "adopt", "readopted", "found our own server pid 9 that was never recorded")
    assert (events.operator_start("chat", "cleared gave-up", at=NOW).kind,
            events.manifests_invalid("1 problem(s)", git_commit=None, at=NOW).kind,
            events.manifests_valid(git_commit=None, at=NOW).kind) == (
        "operator-start", "invalid", "valid")
    assert events.manifests_invalid("x", git_commit=None, at=NOW).role == "manifests"
