"""The linear residency ledger decides exactly what the quadratic one did (differential test)."""

from __future__ import annotations

from hypothesis import assume, example, given, target
from hypothesis import strategies as st

from reconciler.planner import ledger
from reconciler.planner import loadrungs
from reconciler.core.decisions import Decision, Reason, Verb, flat
from reconciler.planner.ledger import CLAIMS, Draft
from reconciler.planner.plan import plan
from reconciler.core.units import format_size
from tests.plan import oracle_ledger
from tests.plan.worlds import World, worlds

NAMES = ("a", "b", "c", "d", "e", "f", "g", "h")
VERBS = (Verb.START, Verb.RESTART, Verb.LOAD, Verb.KEEP, Verb.WAIT, Verb.STOP)
REASONS = (Reason.MISSING, Reason.CRASHED, Reason.EVICTED, Reason.SPEC_CHANGED)


@st.composite
def drafts(draw) -> tuple[list[Draft], int | None, dict[str, frozenset[str]]]:
    """Holders and claims on a tight budget: refusals, releases and shrinking restarts abound."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1))
    out = []
    for name in names:
        verb = draw(st.sampled_from(VERBS))
        holds = draw(st.one_of(st.none(), st.integers(0, 6)))
        reserve = draw(st.integers(0, 6))
        # What each verb carries: a claim its reserve, a load its tag, a stop its target.
        carried = ({"reserve": reserve} if verb in CLAIMS else {}) | (
            {"model_tag": "m"} if verb is Verb.LOAD else
            {"pid": 1, "create_time": 1.0} if verb is Verb.STOP else {})
        out.append(Draft(
            decision=flat(role=name, verb=verb, reason=draw(st.sampled_from(REASONS)),
                          port=draw(st.sampled_from([None, 1, 2, 3])),
                          release=draw(st.integers(0, 3)),
                          restarts=draw(st.integers(1, 3)), **carried),
            holds=holds,
            keeps_on_refusal=verb is Verb.RESTART and holds is not None and draw(st.booleans()),
        ))
    excludes = {n: frozenset(draw(st.lists(st.sampled_from(NAMES), max_size=3))) - {n}
                for n in names}
    budget = draw(st.one_of(st.none(), st.integers(0, 20)))
    return out, budget, excludes


def _d(name: str, verb: Verb, reserve: int, **kw) -> Decision:
    return flat(role=name, verb=verb, reason=Reason.MISSING, reserve=reserve, **kw)


# A chain over three rounds: b's refusal frees room for a (an earlier claim),
# whose shrinking restart then frees room for c (earlier still).
CHAIN = ([
    Draft(decision=_d("a", Verb.RESTART, 2, port=1), holds=6, keeps_on_refusal=True),
    Draft(decision=_d("b", Verb.RESTART, 9, port=2), holds=9),
    Draft(decision=_d("c", Verb.RESTART, 5, port=0)),
], 10, {"a": frozenset(), "b": frozenset(), "c": frozenset()})


@given(drafts())
@example(CHAIN)
def test_linear_place_matches_the_quadratic_oracle(case) -> None:
    """For any holders, claims, budget and exclusions, both ledgers give the same decisions."""
    items, budget, excludes = case
    want = oracle_ledger.place(items, budget, excludes)
    target(float(sum(d.verb is Verb.REFUSE for d in want)), label="refusals")
    assert ledger.place(items, budget, excludes) == want


def test_the_chain_needs_three_rounds() -> None:
    """The chained example really exercises the fixpoint: a and c fit only after b is refused."""
    items, budget, excludes = CHAIN
    verbs = {d.role: d.verb for d in ledger.place(items, budget, excludes)}
    assert verbs == {"a": Verb.RESTART, "b": Verb.REFUSE, "c": Verb.RESTART}


def test_an_unplaceable_message_names_every_other_holder() -> None:
    """A refusal names the holders by name with their sizes, never the claimant itself."""
    items = [
        Draft(decision=_d("a", Verb.KEEP, 0), holds=2 * 10**9),
        Draft(decision=_d("m", Verb.RESTART, 9 * 10**9, port=1), holds=10**9,
              keeps_on_refusal=True),
        Draft(decision=_d("z", Verb.KEEP, 0), holds=3 * 10**9),
    ]
    got = ledger.place(items, 10 * 10**9, {})
    assert got[1].verb is Verb.REFUSE
    assert got[1].detail == ("'m' needs 9.0 GB but only 5.0 GB of the 10.0 GB budget is free "
                             "(held by a 2.0 GB, z 3.0 GB)")


def test_a_refusal_among_thousands_names_the_largest_holders_and_counts_the_rest() -> None:
    """§7 a line an operator can read: past NAMED others, the largest first, then a count."""
    gb = 10**9
    items = [Draft(decision=_d(f"h{i:04d}", Verb.KEEP, 0), holds=(i % 50 + 1) * gb)
             for i in range(2000)]
    items.append(Draft(decision=_d("claim", Verb.START, 10 * gb, port=1)))
    budget = sum(d.holds for d in items if d.holds) + 5 * gb
    got = ledger.place(items, budget, {})[-1]
    assert got.verb is Verb.REFUSE
    largest = ", ".join(f"h{i:04d} 50.0 GB" for i in range(49, 449, 50))
    assert got.detail == (f"'claim' needs 10.0 GB but only 5.0 GB of the {format_size(budget)} "
                          f"budget is free (held by {largest} and 1,992 more "
                          f"({format_size(budget - 5 * gb - 8 * 50 * gb)}))"), got.detail
    assert got.detail == oracle_ledger.place(items, budget, {})[-1].detail


def test_a_claimant_among_the_largest_is_not_named_and_not_counted() -> None:
    """§7 a refusal names the largest holders but never the claimant itself, and counts the rest; as
    the oracle ledger says."""
    gb = 10**9
    items = [Draft(decision=_d(f"h{i}", Verb.KEEP, 0), holds=gb) for i in range(9)]
    items.append(Draft(decision=_d("big", Verb.RESTART, 20 * gb, port=1), holds=5 * gb,
                       keeps_on_refusal=True))
    got = ledger.place(items, 15 * gb, {})[-1]
    assert got.verb is Verb.REFUSE
    assert "big" not in got.detail.split("(held by ")[1]
    assert got.detail.endswith("h7 1.0 GB and 1 more (1.0 GB))"), got.detail
    assert got.detail == oracle_ledger.place(items, 15 * gb, {})[-1].detail


@given(worlds())
def test_plans_with_either_ledger_are_equal(w: World) -> None:
    """Whole plans over generated worlds are the same with the oracle ledger swapped in.

    (Roles sharing one Ollama model are resident together since round 2: the
    oracle knows nothing of that, so such worlds are left to the goldens.)
    """
    models = {m.name: m for m in w.desired.models}
    served = loadrungs.served(w.desired.roles, models)
    assume(all(len(group) < 2 for here in served.values() for _, group in here))
    got = plan(w.desired, w.observed, w.remembered, w.ctx, w.now)
    real = ledger.place
    ledger.place = lambda drafts, budget, excludes, together, *devices: oracle_ledger.place(
        drafts, budget, excludes)
    try:
        want = plan(w.desired, w.observed, w.remembered, w.ctx, w.now)
    finally:
        ledger.place = real
    assert got == want
