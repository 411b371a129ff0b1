"""§13 which changes a rollout stages and which apply at once; a node's pass's choice per role."""

from __future__ import annotations

import attrs

from reconciler.core.desired import WantedState
from reconciler.core.rollouts import Rollout, Wave
from reconciler.core.labels import selector
from reconciler.manifests.rolloutdoc import parse_time
from reconciler.planner import rollout as ro
from reconciler.planner.rollout import Kind, Take
from tests.support.fakes import role_spec

START = parse_time("2026-12-02T14:00:00Z")
OLD = role_spec("coder")
NEW = attrs.evolve(OLD, restarted_at="new build")
ROLLOUT = Rollout(name="up", start=START, duration=7200.0,
                  waves=(Wave(name="canary", canary=True, selector=selector({"ring": "canary"})),),
                  roles=frozenset({"coder", "chat"}))


def test_golden_changes() -> None:
    """Staged: a spec change of a running role. At once: removed, state: stopped, new on the
    node, not running, a revert to what the node ran before. Same: nothing changes."""
    stopped = attrs.evolve(NEW, state=WantedState.STOPPED)
    cases = [
        (OLD, NEW, None, Kind.STAGED, "changes restarted_at"),
        (OLD, attrs.evolve(OLD, serve=attrs.evolve(OLD.serve, port=20002)), None, Kind.STAGED,
         "changes serve"),
        (OLD, None, None, Kind.AT_ONCE, "role removed"),
        (OLD, stopped, None, Kind.AT_ONCE, "state: stopped"),
        (None, NEW, None, Kind.AT_ONCE, "new on this node: nothing runs to keep"),
        (attrs.evolve(OLD, state=WantedState.STOPPED), NEW, None, Kind.AT_ONCE,
         "not running: nothing runs to keep"),
        (NEW, OLD, OLD, Kind.AT_ONCE, "a revert to what this node ran before"),
        (NEW, OLD, None, Kind.STAGED, "changes restarted_at"),
        (OLD, OLD, None, Kind.SAME, "unchanged"),
        (None, None, None, Kind.SAME, "unchanged"),
    ]
    for runs, new, before, kind, reason in cases:
        got = ro.change(runs, new, before=before)
        assert (got.kind, got.reason) == (kind, reason), (runs, new, before)


def test_where_a_document_was_written_is_no_change() -> None:
    """Moving a role's document to another file or line (its ``ref``) stages nothing."""
    from reconciler.core.desired import SourceRef

    moved = attrs.evolve(OLD, ref=SourceRef(file="other.yaml", line=40))
    assert ro.change(OLD, moved).kind is Kind.SAME


def choose(now: float, *, runs=None, new=None, labels=None, rollouts=(ROLLOUT,), before=None):
    return ro.choose(runs if runs is not None else {"coder": OLD},
                     new if new is not None else {"coder": NEW},
                     rollouts=rollouts, node="gpu-2", labels=labels or {}, now=now, gates={},
                     before=before)


def test_a_node_keeps_what_it_runs_until_its_turn_then_takes_the_new_spec() -> None:
    """Before its moment the pass keeps the previous spec, saying when it moves; at the end
    of the window (no gate declared) it takes the new one."""
    held = choose(START + 60)["coder"]
    assert held.take is Take.PREVIOUS
    assert held.reason.startswith("rollout up: wave canary first; this node moves at ")
    assert choose(START + 7200)["coder"].take is Take.NEW


def test_a_canary_takes_it_at_once() -> None:
    """A node of the canary wave moves when the rollout starts."""
    got = choose(START, labels={"ring": "canary"})["coder"]
    assert (got.take, got.reason) == (Take.NEW, "rollout up: wave canary, moved at 14:00Z")


def test_what_applies_at_once_is_never_held_by_a_rollout() -> None:
    """A role removed, stopped, or reverted is taken at once, even while paused."""
    paused = (attrs.evolve(ROLLOUT, paused=True),)
    got = choose(START - 3600, runs={"coder": NEW, "chat": OLD},
                 new={"coder": OLD, "chat": attrs.evolve(OLD, state=WantedState.STOPPED)},
                 before={"coder": OLD}, rollouts=paused)
    assert {r: (c.take, c.reason) for r, c in got.items()} == {
        "coder": (Take.NEW, "a revert to what this node ran before"),
        "chat": (Take.NEW, "state: stopped")}
    gone = choose(START - 3600, new={}, rollouts=paused)["coder"]
    assert (gone.take, gone.reason) == (Take.NEW, "role removed")


def test_a_role_no_rollout_covers_takes_the_change_at_once() -> None:
    """Only the roles a Rollout covers are staged; others change at once, saying so."""
    other = {"embed": attrs.evolve(OLD, name="embed")}
    got = choose(START - 3600, runs=other,
                 new={"embed": attrs.evolve(other["embed"], restarted_at="x")})["embed"]
    assert (got.take, got.reason) == (Take.NEW, "no rollout stages it")


def test_a_rollout_naming_a_role_stages_every_instance_of_it() -> None:
    """§12/§13 `roles: [coder]` covers `coder/1` and `coder/2` too (instances carry the role's
    name as their group); a role merely sharing a prefix (`coder2`) is not covered."""
    assert ROLLOUT.covers("coder") and ROLLOUT.covers("coder/1") and ROLLOUT.covers("coder/2")
    assert not ROLLOUT.covers("coder2") and not ROLLOUT.covers("embed/1")
    runs = {"coder/1": attrs.evolve(OLD, name="coder/1")}
    got = choose(START - 3600, runs=runs,
                 new={"coder/1": attrs.evolve(runs["coder/1"], restarted_at="x")})["coder/1"]
    assert got.take is Take.PREVIOUS, got.reason


def test_a_pause_holds_a_staged_change_where_it_stands() -> None:
    """Paused: a staged change waits on every node, canaries included, after the window too."""
    got = choose(START + 10 * 7200, labels={"ring": "canary"},
                 rollouts=(attrs.evolve(ROLLOUT, paused=True),))["coder"]
    assert (got.take, got.reason) == (Take.PREVIOUS, "rollout up: paused (Rollout up)")


# ------------------------------------------------------------ properties

from hypothesis import given, strategies as st  # noqa: E402

specs = st.sampled_from([None, OLD, NEW, attrs.evolve(OLD, state=WantedState.STOPPED),
                         attrs.evolve(NEW, state=WantedState.STOPPED),
                         attrs.evolve(OLD, serve=attrs.evolve(OLD.serve, port=20009))])


@given(specs, specs, specs)
def test_a_revert_a_removal_and_a_stop_are_never_staged(runs, new, before) -> None:
    """Whatever the node runs and ran before: going back to either, removing the role and
    stopping it always apply at once (or are no change); only a running role is staged."""
    got = ro.change(runs, new, before=before)
    if new is None or new == runs or (before is not None and new == before) or (
            new.state is WantedState.STOPPED):
        assert got.kind is not Kind.STAGED
    if got.kind is Kind.STAGED:
        assert runs is not None and runs.state is not WantedState.STOPPED


def test_a_pass_asks_a_gate_only_when_a_staged_change_waits_on_it() -> None:
    """gates_to_ask: nothing before the node's moment, nothing for a change applied at once
    or a node of the first wave; (rollout, wave) once the moment of a later wave's node has
    come and a gate is declared."""
    from reconciler.core.rollouts import PrometheusGate

    gated = (attrs.evolve(ROLLOUT, gate=PrometheusGate(url="http://p:9090", query="up")),)

    def ask(now, **kw):
        return ro.gates_to_ask(kw.get("runs", {"coder": OLD}), kw.get("new", {"coder": NEW}),
                               rollouts=kw.get("rollouts", gated), node="gpu-2",
                               labels=kw.get("labels", {}), now=now)

    assert ask(START + 60) == ()
    assert ask(START + 7200) == (("up", "rest"),)
    assert ask(START + 7200, labels={"ring": "canary"}) == ()
    assert ask(START + 7200, new={}) == ()
    assert ask(START + 7200, rollouts=(ROLLOUT,)) == ()
