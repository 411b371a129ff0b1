"""§13 the schedule of a rollout: golden cases and properties of ``planner/rollout.py``."""

from __future__ import annotations

import hashlib

import attrs
from hypothesis import given, settings, strategies as st

from reconciler.core.labels import selector
from reconciler.core.rollouts import POSITION_LABEL, PrometheusGate, Rollout, Wave
from reconciler.manifests.rolloutdoc import parse_time
from reconciler.planner import rollout as ro
from reconciler.planner.rollout import GateAnswer, Why

START = parse_time("2026-12-02T14:00:00Z")
HOUR = 3600.0
OPEN = GateAnswer(open=True, reason="healthy")
SHUT = GateAnswer(open=False, reason="1 of 1 samples not healthy")

CANARY = Wave(name="canary", canary=True, selector=selector({"ring": "canary"}))
EARLY = Wave(name="early", selector=selector({"ring": "early"}))
GATE = PrometheusGate(url="http://prom:9090", query="up")


def rollout(**kw) -> Rollout:
    """A 3-hour rollout from 14:00Z: canary (14:00), early (15:00-16:00), rest (16:00-17:00)."""
    base = dict(name="up", start=START, duration=3 * HOUR, waves=(CANARY, EARLY), gate=GATE)
    return Rollout(**{**base, **kw})


def test_the_place_within_a_wave_is_a_sha256_of_the_name_not_pythons_hash() -> None:
    """A node's fraction is the first 8 bytes of SHA-256 of its name over 2^64: the same on
    every machine and every run (Python's hash() is salted per process)."""
    want = int.from_bytes(hashlib.sha256(b"gpu-7").digest()[:8], "big") / 2**64
    assert ro.fraction_of("gpu-7") == want
    place = ro.place(rollout(), "gpu-7", {"ring": "early"})
    assert (place.wave_name, place.opens) == ("early", START + HOUR)
    assert place.at == START + HOUR + want * HOUR


def test_golden_turns_of_a_canary_an_early_node_and_the_rest() -> None:
    """The reasons the plan shows, at 13:00, 14:10, 15:30, 16:10 and after the window."""
    r = rollout()
    labels = {"gpu-1": {"ring": "canary"}, "gpu-2": {"ring": "early", POSITION_LABEL: "0.5"},
              "gpu-3": {POSITION_LABEL: "0.25"}}

    def at(node: str, hhmm: str, gates=None) -> tuple[bool, str]:
        turn = ro.turn(r, node, labels[node], parse_time(f"2026-12-02T{hhmm}:00Z"), gates or {})
        return turn.moves, turn.reason

    assert at("gpu-1", "13:00") == (False, "the rollout starts at 14:00Z; this node moves at 14:00Z")
    assert at("gpu-1", "14:00") == (True, "wave canary, moved at 14:00Z")
    assert at("gpu-2", "14:10") == (False, "wave canary first; this node moves at 15:30Z")
    assert at("gpu-2", "15:10") == (False, "wave early is moving; this node moves at 15:30Z")
    assert at("gpu-2", "15:30") == (False, "wave early: gate unknown: not asked (offline)")
    assert at("gpu-2", "15:30", {"early": SHUT}) == (
        False, "wave early: gate closed: 1 of 1 samples not healthy")
    assert at("gpu-2", "15:30", {"early": OPEN}) == (True, "wave early, moved at 15:30Z")
    assert at("gpu-3", "15:30", {"early": OPEN}) == (False, "wave early first; this node moves at 16:15Z")
    assert at("gpu-3", "16:20", {"early": OPEN}) == (False, "wave rest: gate unknown: not asked (offline)")
    assert at("gpu-3", "16:20", {"rest": OPEN}) == (True, "wave rest, moved at 16:15Z")


def test_a_pause_holds_even_the_canary_and_says_so() -> None:
    """paused: every node holds where it stands, reason `paused (Rollout up)`."""
    turn = ro.turn(rollout(paused=True), "gpu-1", {"ring": "canary"}, START + 10 * HOUR,
                   {"early": OPEN, "rest": OPEN})
    assert (turn.moves, turn.why, turn.reason) == (False, Why.PAUSED, "paused (Rollout up)")


def test_without_waves_every_node_is_in_one_wave_and_no_gate_is_asked() -> None:
    """No waves: one implicit wave `rest` spanning the window; the first wave needs no gate."""
    r = rollout(waves=())
    place = ro.place(r, "gpu-9", {})
    assert (place.wave, place.wave_name, place.opens) == (0, "rest", START)
    assert ro.turn(r, "gpu-9", {}, r.end, {}).moves


def test_a_last_wave_with_no_selector_takes_the_rest_and_no_rest_wave_is_added() -> None:
    """A last declared wave that admits every node is the last wave: no implicit `rest`."""
    r = rollout(waves=(CANARY, Wave(name="everyone")))
    assert [w.name for w in r.all_waves] == ["canary", "everyone"]
    assert ro.place(r, "gpu-4", {}).wave_name == "everyone"


def test_a_position_label_out_of_range_falls_back_to_the_hash() -> None:
    """`reconciler.io/rollout-position: "1.5"` is no position: the name's hash places it."""
    place = ro.place(rollout(), "gpu-5", {POSITION_LABEL: "1.5"})
    assert place.fraction == ro.fraction_of("gpu-5")


def test_moments_far_from_now_carry_their_date() -> None:
    """A moment more than a day away is shown with its date; seconds only when not 0."""
    assert ro.clock(START, START - 2 * 86400) == "2026-12-02 14:00Z"
    assert ro.clock(START + 30, START) == "14:00:30Z"


# ------------------------------------------------------------ properties

names = st.text("abcdefgh-0123456789", min_size=1, max_size=12)
rings = st.sampled_from(["canary", "early", "late", "none"])
moments = st.floats(min_value=START - 2 * HOUR, max_value=START + 6 * HOUR)
answers = st.sampled_from([OPEN, SHUT, GateAnswer(open=None, reason="unreachable")])
gate_maps = st.dictionaries(st.sampled_from(["canary", "early", "rest"]), answers)
rollouts = st.builds(
    lambda duration, waves, gate, paused: rollout(duration=duration, waves=waves, gate=gate,
                                                  paused=paused),
    st.floats(min_value=1.0, max_value=10 * HOUR),
    st.sampled_from([(), (CANARY,), (CANARY, EARLY), (EARLY,)]),
    st.sampled_from([None, GATE]), st.just(False))


@settings(max_examples=300, deadline=None)
@given(rollouts, names, rings, moments, gate_maps)
def test_a_node_never_moves_before_its_wave_is_reached(r, node, ring, now, gates) -> None:
    """A node that moves has reached its wave's opening and its own moment, and past the
    first wave its wave's gate answered open."""
    turn = ro.turn(r, node, {"ring": ring}, now, gates)
    if turn.moves:
        assert now >= turn.place.opens and now >= turn.place.at >= r.start
        if turn.place.wave > 0 and r.gate is not None:
            assert gates[turn.place.wave_name].open is True


@settings(max_examples=200, deadline=None)
@given(rollouts, names, rings, moments, gate_maps)
def test_a_pause_freezes_everything(r, node, ring, now, gates) -> None:
    """Paused, no node moves, whatever the time and the gates say."""
    turn = ro.turn(attrs.evolve(r, paused=True), node, {"ring": ring}, now, gates)
    assert not turn.moves and turn.why is Why.PAUSED


@settings(max_examples=200, deadline=None)
@given(rollouts, names, rings, st.floats(min_value=0, max_value=HOUR))
def test_once_the_window_has_run_out_and_the_gates_passed_every_node_moves(r, node, ring, after) -> None:
    """At or after start + duration, with every gate open, every node moves."""
    gates = {w.name: OPEN for w in r.all_waves}
    assert ro.turn(r, node, {"ring": ring}, r.end + after, gates).moves


@settings(max_examples=300, deadline=None)
@given(rollouts, names, rings, moments, moments, gate_maps)
def test_the_turn_is_monotone_in_now(r, node, ring, a, b, gates) -> None:
    """For fixed gate answers, a node that moves at some time still moves at any later one."""
    early, late = sorted((a, b))
    if ro.turn(r, node, {"ring": ring}, early, gates).moves:
        assert ro.turn(r, node, {"ring": ring}, late, gates).moves


@settings(max_examples=200, deadline=None)
@given(rollouts, names, rings)
def test_waves_move_in_order(r, node, ring) -> None:
    """A node's moment lies within its wave's slice of the window, slices in wave order; a
    canary moves when its wave opens."""
    place = ro.place(r, node, {"ring": ring})
    width = r.duration / len(r.all_waves)
    assert place.opens == r.start + place.wave * width
    assert place.opens <= place.at <= min(place.opens + width, r.end)
    if r.all_waves[place.wave].canary:
        assert place.at == place.opens
