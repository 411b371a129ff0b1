"""The balancing policy on its own (BEHAVIOUR §9.1): which instance of a group a request goes to.

Pure: instances as values, no proxy. The properties are the issue's: never a full instance
while another has room, only ready ones, the one chosen has the least load; and the fixed
cases pin slots, ``max_concurrency``, a group of one and the rotation of ties.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, strategies as st

from reconciler.router.balancing import Instance, capacity, choose, full, slots_of

instances = st.lists(st.builds(
    Instance, name=st.text("abc", min_size=1, max_size=3), ready=st.booleans(),
    in_flight=st.integers(0, 10), slots=st.none() | st.integers(1, 8),
    max_concurrency=st.none() | st.integers(1, 8)), min_size=1, max_size=8)


def _load(i: Instance, alone: bool) -> Fraction:
    return Fraction(i.in_flight, capacity(i, alone) or 1)


def _room(i: Instance, alone: bool) -> bool:
    bound = capacity(i, alone)
    return bound is None or i.in_flight < bound


@given(instances, st.integers(0, 100))
def test_never_a_full_instance_while_another_has_room(group, turn) -> None:
    """§9.1 a request goes to an instance with room whenever one exists, and is held (None)
    only when every ready instance is full (or none is ready)."""
    alone = len(group) == 1
    chosen = choose(group, turn)
    ready_with_room = [i for i in group if i.ready and _room(i, alone)]
    if ready_with_room:
        assert chosen is not None and _room(chosen, alone)
    else:
        assert chosen is None


@given(instances, st.integers(0, 100))
def test_only_a_ready_instance_is_chosen(group, turn) -> None:
    """§9.1 an instance that starts, drains or failed (not ready) is never chosen."""
    chosen = choose(group, turn)
    assert chosen is None or chosen.ready


@given(instances, st.integers(0, 100))
def test_the_chosen_instance_has_the_least_load(group, turn) -> None:
    """§9.1 the instance chosen has the fewest in flight relative to its capacity among
    the ready instances with room."""
    alone = len(group) == 1
    chosen = choose(group, turn)
    if chosen is not None:
        assert _load(chosen, alone) == min(_load(i, alone) for i in group
                                           if i.ready and _room(i, alone))


@given(instances)
def test_full_means_held(group) -> None:
    """§9.1 ``full`` (queue) exactly when some instance is ready and the policy holds the
    request."""
    assert full(group) == (any(i.ready for i in group) and choose(group) is None)


def test_ties_go_round_the_group() -> None:
    """§9.1 equal loads: successive turns go to each instance in turn, not all to the first."""
    group = [Instance(name=n, slots=2) for n in ("chat", "chat/1", "chat/2")]
    assert [choose(group, t).name for t in range(6)] == ["chat", "chat/1", "chat/2"] * 2


def test_slots_weigh_the_load() -> None:
    """§9.1 load is in flight over slots: 2 of 4 slots busy is less loaded than 1 of 1."""
    group = [Instance(name="a", in_flight=1, slots=1), Instance(name="b", in_flight=2, slots=4)]
    assert choose(group).name == "b"
    # unknown slots count as one: a busy instance of unknown size is full
    group = [Instance(name="a", in_flight=1), Instance(name="b", in_flight=2, slots=4)]
    assert choose(group).name == "b"
    assert choose([Instance(name="a", in_flight=1), Instance(name="b", in_flight=1)]) is None


def test_max_concurrency_bounds_below_slots() -> None:
    """§9.1 capacity is the smaller of slots and max_concurrency."""
    group = [Instance(name="a", in_flight=2, slots=8, max_concurrency=2),
             Instance(name="b", in_flight=5, slots=8)]
    assert choose(group).name == "b"
    assert capacity(Instance(name="a", slots=8, max_concurrency=2)) == 2


def test_a_group_of_one_is_bounded_by_max_concurrency_alone() -> None:
    """§9.1 a role without replicas is forwarded as before: beyond its slots its server
    queues; only max_concurrency holds requests in the router."""
    assert choose([Instance(name="chat", in_flight=7, slots=1)]).name == "chat"
    assert choose([Instance(name="chat", in_flight=2, max_concurrency=2)]) is None


def test_slots_are_read_from_props() -> None:
    """§9.1 llama-server's ``/props`` ``total_slots``; anything else is not a slot count."""
    assert slots_of({"total_slots": 4}) == 4
    for bad in ({}, {"total_slots": 0}, {"total_slots": True}, {"total_slots": "4"}, [], None):
        assert slots_of(bad) is None
