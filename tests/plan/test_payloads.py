"""Decisions by verb: each verb carries its own payload, and no impossible one can be built.

``core/decisions.py``: a decision's verb is its payload's class; the flat spelling
(``flat``, ``act_of``) refuses a field the verb does not carry; the renderer and
the recorder have a case for every payload.
"""

from __future__ import annotations

import pytest

from reconciler.core.decisions import (
    ACTING_VERBS, Decision, Reason, Stop, Target, Verb, act_of, flat)
from reconciler.planner import render
from tests.plan.payloads import SAMPLES, TARGET


@pytest.mark.parametrize("verb,fields,problem", [
    (Verb.KEEP, {"launch": object()}, "carries no launch"),
    (Verb.STOP, {"reserve": 5}, "carries no reserve"),
    (Verb.REFUSE, {"reserve": 5}, "carries no reserve"),
    (Verb.UNLOAD, {"keep_alive": 60.0}, "carries no keep_alive"),
    (Verb.START, {"model_tag": "qwen"}, "carries no model_tag"),
    (Verb.STOP, {}, "needs the pid it targets"),
    (Verb.STOP, {"pid": 7}, "has no create time"),
    (Verb.GIVE_UP, {"pid": 7, "create_time": 1.0}, "targets no pid"),
])
def test_an_impossible_decision_cannot_be_built(verb, fields, problem) -> None:
    """A field the verb does not carry (a keep's launch, a refusal's reserve), or a stop
    without the whole process it targets, is refused where the decision is built."""
    with pytest.raises(TypeError, match=problem):
        act_of(verb, **fields)


def test_the_verb_is_the_payloads() -> None:
    """``Decision.verb`` is its payload's: a decision cannot say one verb and carry another."""
    import attrs

    from reconciler.core.decisions import Forget
    for act in SAMPLES:
        d = Decision(role="coder", act=act, reason=Reason.MISSING)
        assert d.verb is type(act).verb and d.acts == (d.verb in ACTING_VERBS)
        assert attrs.evolve(d, act=Forget()).verb is Verb.FORGET  # it follows the payload
    with pytest.raises(TypeError):
        Decision(role="coder", act=SAMPLES[0], reason=Reason.MISSING, verb=Verb.KEEP)


def test_the_flat_spelling_builds_the_same_payload() -> None:
    """The flat fields land in the verb's payload; the process goes where the verb names it."""
    d = flat(role="coder", verb=Verb.STOP, reason=Reason.REMOVED, pid=4242, create_time=1.0,
             owner_id="coder-1", instance_id="coder-2")
    assert d.act == Stop(target=TARGET) and (d.pid, d.create_time, d.owner_id) == (
        4242, 1.0, "coder-1")
    d = flat(role="coder", verb=Verb.LOAD, reason=Reason.MISSING, model_tag="qwen",
             keep_alive=60.0, reserve=3)
    assert (d.model_tag, d.keep_alive, d.reserve, d.pid, d.launch) == ("qwen", 60.0, 3, None, None)
    stop = flat(role="coder", verb=Verb.STOP, reason=Reason.REMOVED, pid=1, create_time=2.0,
                instance_id="coder-3")
    assert stop.act == Stop(target=Target(pid=1, create_time=2.0, owner_id="coder-3"))


def test_every_payload_renders_and_says_its_verb() -> None:
    """The renderer has a case for every payload: each line starts with its verb's symbol,
    a load or unload names its tag, and the JSON carries what the payload carries."""
    for act in SAMPLES:
        d = Decision(role="coder", act=act, reason=Reason.MISSING, port=8090)
        text = render.line(d)
        assert text.startswith(f"{render.SYMBOLS[d.verb]} {d.verb} coder :8090"), text
        assert ("qwen" in text) == (d.verb in (Verb.LOAD, Verb.UNLOAD)), text
        data = render.decision_json(d)
        assert data["verb"] == str(d.verb) and data["pid"] == d.pid
        assert data["model_tag"] == ("qwen" if d.verb in (Verb.LOAD, Verb.UNLOAD) else None)
        assert data["keep_alive"] == (60.0 if d.verb is Verb.LOAD else None)


def test_placed_keeps_every_other_field() -> None:
    """``Decision.placed`` (evolve spelled out, for speed) changes the devices and the payload
    and keeps every other field: a field added to Decision and forgotten there fails here."""
    import attrs

    from reconciler.core.decisions import Status, Start
    from reconciler.core.desired import Runtime
    values = dict(role="coder", act=Start(launch=None, reserve=3), reason=Reason.SPEC_CHANGED,
                  why="ctx", status=Status.RUNNING, detail="d", runtime=Runtime.LLAMACPP,
                  port=8090, host="127.0.0.1", instance_id="coder-1", release=2, retry_in=1.5,
                  restarts=2, devices=(("cuda:0", 1),))
    assert set(values) == {a.name for a in attrs.fields(Decision) if a.init}  # each set, not default
    d = Decision(**values)
    act = Start(launch=None, reserve=3, generation="g")
    assert d.placed((("cuda:1", 1),), act) == attrs.evolve(d, devices=(("cuda:1", 1),), act=act)


def test_decided_builds_the_decision_the_keywords_build(monkeypatch) -> None:
    """``decided`` (the planner's maker, by position) gives the very ``Decision`` the keyword
    constructor gives: equal, of that class, hashed alike, frozen, its verb its payload's;
    the plain-store maker on this Python, and the keyword fallback gives the same."""
    import attrs

    from reconciler.core import positional
    from reconciler.core.decisions import Start, Status, decided
    from reconciler.core.desired import Runtime
    values = dict(role="coder", act=Start(launch=None, reserve=3), reason=Reason.SPEC_CHANGED,
                  why="ctx", status=Status.RUNNING, detail="d", runtime=Runtime.LLAMACPP,
                  port=8090, host="127.0.0.1", instance_id="coder-1", release=2, retry_in=1.5,
                  restarts=2, devices=(("cuda:0", 1),))
    assert list(values) == [a.name for a in attrs.fields(Decision) if a.init]  # the order
    expected = Decision(**values)
    assert positional.TWINS and decided.__name__ == "_DecisionByPosition"
    monkeypatch.setattr(positional, "TWINS", False)
    for maker in (decided, positional.by_position(Decision, verb="act.verb")):
        d = maker(*values.values())
        assert type(d) is Decision and d == expected and hash(d) == hash(expected)
        assert d.verb is Verb.START and attrs.evolve(d, why="x").why == "x"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            d.role = "other"  # type: ignore[misc]


def test_by_position_builds_the_value_the_keywords_build(monkeypatch) -> None:
    """``by_position(cls)`` (the planner's maker of payloads and targets) gives the very value
    ``cls(**fields)`` gives, for every payload class the planner builds by position: equal, of
    that class, frozen; a field dropped or swapped in the maker, or in its keyword fallback,
    fails here."""
    import attrs

    from reconciler.core import positional
    from reconciler.core.decisions import Keep, Refuse, Restart, Start, Wait
    target = TARGET
    cases = ((Target, dict(pid=7, create_time=1.5, owner_id="coder-1")),
             (Keep, dict(running=target)), (Wait, dict(running=target)),
             (Refuse, dict(running=target)),
             (Start, dict(launch=None, reserve=3, generation="g", restarted_at="t")),
             (Restart, dict(launch=None, replaces=target, reserve=3, generation="g",
                            restarted_at="t")))
    for twins in (True, False):
        monkeypatch.setattr(positional, "TWINS", twins)
        for cls, values in cases:
            assert list(values) == [a.name for a in attrs.fields(cls)]
            got = positional.by_position(cls)(*values.values())
            assert type(got) is cls and got == cls(**values), cls
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                setattr(got, next(iter(values)), None)
