"""What the store remembers is one small function per verb (``records.AFTER``)."""

from __future__ import annotations

import inspect

from reconciler.core.decisions import Verb
from reconciler.core.events import EventKind
from reconciler.planner import records


def test_every_verb_has_its_function() -> None:
    """Every plan verb says what the store remembers after it: no verb falls through."""
    assert set(records.AFTER) == set(Verb)


def test_each_verb_function_stays_small() -> None:
    """A verb's rule is one small function (a new verb is a new function, not a new branch)."""
    for verb, step in records.AFTER.items():
        assert len(inspect.getsource(step).splitlines()) <= 50, verb


def test_every_verb_is_an_event_kind_of_its_own_word() -> None:
    """The event log's kinds are derived from the verbs: one list, the same words."""
    for verb in Verb:
        assert EventKind.of(verb) is EventKind[verb.name] and EventKind.of(verb) == verb.value
    assert len(EventKind) == len(Verb) + 4
