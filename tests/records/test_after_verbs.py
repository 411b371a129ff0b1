"""What the store remembers is one small function per verb (``records.step_of``)."""

from __future__ import annotations

import inspect
import typing

from reconciler.core.decisions import ACT_OF, Act, Verb
from reconciler.core.events import EventKind
from reconciler.planner import records
from tests.plan.payloads import SAMPLES


def test_every_verb_has_its_payload_and_its_function() -> None:
    """Every role verb has one payload class, and ``step_of`` says what the store remembers
    after each: no verb falls through (a payload no case names fails ``assert_never``)."""
    assert set(typing.get_args(Act)) == set(ACT_OF.values()) == {type(a) for a in SAMPLES}
    assert set(ACT_OF) == set(Verb) - {Verb.FETCH}  # a fetch is a Model's, never a role's
    for act in SAMPLES:
        assert callable(records.step_of(act)), act


def test_each_verb_function_stays_small() -> None:
    """A verb's rule is one small function (a new verb is a new function, not a new branch)."""
    for act in SAMPLES:
        assert len(inspect.getsource(records.step_of(act)).splitlines()) <= 50, act


def test_every_verb_is_an_event_kind_of_its_own_word() -> None:
    """The event log's kinds are derived from the verbs: one list, the same words."""
    for verb in Verb:
        assert EventKind.of(verb) is EventKind[verb.name] and EventKind.of(verb) == verb.value
    assert len(EventKind) == len(Verb) + 5  # adopt, operator-start, invalid, valid, rollback
