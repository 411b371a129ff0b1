"""plan --json's ledger and the page's bars: what each role holds once the plan is done (§7, §11)."""

from __future__ import annotations

from reconciler.core.decisions import Decision, Plan, Reason, Verb, flat
from reconciler.core.desired import Desired, NodeConfig
from reconciler.planner import memoryview

PLAN = Plan(decisions=(
    flat(role="kept", verb=Verb.KEEP, reason=Reason.IN_SYNC),
    flat(role="new", verb=Verb.START, reason=Reason.MISSING, reserve=300),
    flat(role="grown", verb=Verb.RESTART, reason=Reason.SPEC_CHANGED, reserve=500,
             release=200),
    flat(role="gone", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED, release=400),
    flat(role="never", verb=Verb.WAIT, reason=Reason.BACKOFF),
))
BEFORE = {"kept": 100, "grown": 200, "gone": 400}


def test_a_plan_not_yet_carried_out_counts_its_reserves_and_releases() -> None:
    """§7/§11 the ledger of a plan not yet carried out counts what it would reserve and release."""
    assert memoryview.held_after(PLAN, BEFORE, applied=False) == {
        "kept": 100, "new": 300, "grown": 500}


def test_after_a_pass_that_acted_the_store_already_holds_the_ledger() -> None:
    """§7/§11 after a pass that acted, the store's reservations are the ledger as it is."""
    after = {"kept": 100, "new": 300, "grown": 500}
    assert memoryview.held_after(PLAN, after, applied=True) == after


def test_the_host_ram_bar_and_its_json() -> None:
    """§7/§11 the host RAM bar: each role's hold and observed use, the budget and scale, and the
    same in ``plan --json``'s ledger."""
    desired = Desired(node=NodeConfig(memory_budget=1000))
    bar = memoryview.host_ram(PLAN, BEFORE, desired, applied=False, observed={"kept": 42})
    assert [(h.role, h.held, h.observed) for h in bar.holdings] == [
        ("kept", 100, 42), ("new", 300, None), ("grown", 500, None)]
    assert (bar.budget, bar.held, bar.scale) == (1000, 900, 1000)
    assert memoryview.as_json(bar) == {
        "name": "host RAM", "budget": 1000, "held": 900,
        "roles": [{"role": "kept", "held": 100, "evictable": False},
                  {"role": "new", "held": 300, "evictable": False},
                  {"role": "grown", "held": 500, "evictable": False}]}
    over = memoryview.host_ram(PLAN, BEFORE, Desired(node=NodeConfig(memory_budget=600)),
                               applied=False)
    assert over.scale == 900  # over its budget, the bar's width is what is held


def test_one_bar_per_declared_device_with_what_each_role_holds_there() -> None:
    """§7.1 on the page: each device is a bar of its memory; a role's share of a device is
    what its decision holds there once done; a stopped role holds nothing; no devices, no bars."""
    from reconciler.core.devices import Device, DeviceKind

    node = NodeConfig(devices=(Device(id="cuda:1", kind=DeviceKind.CUDA, memory=2000),
                               Device(id="cuda:0", kind=DeviceKind.CUDA, memory=1000)))
    plan = Plan(decisions=(
        flat(role="a", verb=Verb.KEEP, reason=Reason.IN_SYNC, devices=(("cuda:0", 600),)),
        flat(role="b", verb=Verb.START, reason=Reason.MISSING,
                 devices=(("cuda:0", 100), ("cuda:1", 700))),
        flat(role="c", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED, devices=(("cuda:1", 900),)),
    ))
    bars = memoryview.device_bars(plan, Desired(node=node))
    assert [(b.name, b.budget, [(h.role, h.held) for h in b.holdings]) for b in bars] == [
        ("cuda:0", 1000, [("a", 600), ("b", 100)]), ("cuda:1", 2000, [("b", 700)])]
    assert memoryview.device_bars(plan, Desired(node=NodeConfig())) == ()
