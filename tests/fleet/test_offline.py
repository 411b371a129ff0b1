"""Offline plans, the fleet view and its diff: what each node would run, from manifests alone."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from reconciler.fleet import fleetdiff, fleetview, offline
from reconciler.manifests import loader
from reconciler.manifests.fleet import NodeChoice
from tests.fleet.worlds import files, model, node, role

OLLAMA_MODEL = {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": "l3"},
                "spec": {"format": "ollama", "source": {"ollama_tag": "llama3:8b"}}}
OLLAMA_ROLE = {"apiVersion": "reconciler/v1", "kind": "InferenceSpec", "metadata": {"name": "ol"},
               "spec": {"runtime": "ollama", "mode": "managed", "model": "l3",
                        "serve": {"port": 11434}, "keep_alive": "5m"}}


def fleet_of(*docs):
    result = loader.load(files(*docs))
    assert result.ok, result.problems
    return result.fleet


def lines(plan) -> list[str]:
    return [f"{d.verb} {d.role} {d.reason}" for d in plan.decisions]


def test_an_offline_plan_starts_loads_and_refuses_as_an_empty_node_would() -> None:
    """Managed roles start, an Ollama tag loads, a stopped role is absent, the ledger refuses."""
    docs = (node("gpu-1", budget="2.5GB", ports=(8000, 12000)), model(), OLLAMA_MODEL,
            OLLAMA_ROLE, role("a", 8001), role("b", 8002, kv="1GB"),
            role("c", 8003, state="stopped"))
    desired = loader.load(files(*docs), node=NodeChoice(name="gpu-1")).desired
    assert sorted(lines(offline.plan(desired))) == [
        "keep c absent", "load ol missing", "refuse b unplaceable", "start a missing"]


def test_the_offline_launch_ignores_the_callers_environment(monkeypatch) -> None:
    """The reviewer's shell does not change an offline plan: nothing is passed through."""
    desired = loader.load(files(node("n"), model(), role("a", 8001))).desired
    monkeypatch.setenv("HOME", "/somewhere/else")
    [start] = offline.plan(desired).decisions
    assert dict(start.launch.env).get("HOME") is None
    assert start.launch.cwd.startswith(offline.DEFAULT_DATA_ROOT + "/a-")


def test_the_fleet_view_has_every_nodes_share_and_memory() -> None:
    """Each node lists its roles with ports and footprints; roles on no node are named."""
    whole = fleet_of(node("gpu-1", labels={"pool": "a"}, budget="10GB"), node("gpu-2"), model(),
                     role("a", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}}),
                     role("b", 8002), role("c", 8003, placement={"nodes": ["nowhere"]}))
    shown = fleetview.as_json(fleetview.view(whole))
    assert [(n["node"], [r["role"] for r in n["roles"]], n["reserved"]) for n in shown["nodes"]] \
        == [("gpu-1", ["a", "b"], 2_000_000_000), ("gpu-2", ["b"], 1_000_000_000)]
    assert shown["nodes"][0]["memory_budget"] == 10_000_000_000
    assert shown["unplaced"] == ["c"]
    text = fleetview.text(fleetview.view(whole))
    assert "gpu-1  2.0 GB of 10.0 GB  (pool=a)" in text
    assert text.endswith("Fleet: 2 nodes, 3 roles placed, 1 on no node.\n")


def diff(old_docs, new_docs) -> list[str]:
    old = fleetview.view(fleet_of(*old_docs))
    new = fleetview.view(fleet_of(*new_docs))
    return [str(c) for c in fleetdiff.diff(old, new)]


NODES = (node("gpu-1", labels={"pool": "a"}), node("gpu-2", labels={"pool": "b"}), model())


def test_a_moved_role_is_minus_on_one_node_and_plus_on_the_other() -> None:
    """Moving a role by its nodes list: - on the old node, + on the new, nothing else."""
    before = NODES + (role("coder", 8001, placement={"nodes": ["gpu-1"]}), role("x", 8002))
    after = NODES + (role("coder", 8001, placement={"nodes": ["gpu-2"]}), role("x", 8002))
    assert diff(before, after) == ["- gpu-1 coder", "+ gpu-2 coder"]


def test_an_edit_is_a_tilde_line_per_node_saying_what_changed() -> None:
    """A ctx edit shows as ctx old → new on every node running the role."""
    before = NODES + (role("coder", 8001, ctx=4096),)
    after = NODES + (role("coder", 8001, ctx=8192),)
    assert diff(before, after) == ["~ gpu-1 coder (ctx 4096 → 8192)",
                                   "~ gpu-2 coder (ctx 4096 → 8192)"]


def test_a_relabelled_node_takes_the_selected_role_with_it() -> None:
    """Relabelling gpu-2 into pool a: a node line, and the selected role arrives there."""
    selected = role("s", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}})
    after_nodes = (node("gpu-1", labels={"pool": "a"}), node("gpu-2", labels={"pool": "a"}), model())
    assert diff(NODES + (selected,), after_nodes + (selected,)) == [
        "~ gpu-2 (label pool b → a)", "+ gpu-2 s"]


def test_a_new_node_and_a_role_that_would_be_refused_there() -> None:
    """A node added is a + line; a role arriving where the ledger refuses it says so."""
    before = (node("gpu-1"), model(size=5_000_000_000), role("big", 8001))
    after = (node("gpu-1"), node("small", budget="1GB"), model(size=5_000_000_000),
             role("big", 8001))
    assert diff(before, after) == ["+ small", "+ small big (refuse: unplaceable)"]


def test_a_budget_cut_shows_on_the_node_and_on_the_role_it_refuses() -> None:
    """A smaller budget: the node's line, and the role's start → refuse."""
    before = (node("gpu-1", budget="10GB"), model(), role("a", 8001))
    after = (node("gpu-1", budget="0.5GB"), model(), role("a", 8001))
    assert diff(before, after) == [
        "~ gpu-1 (memory_budget 10.0 GB → 500.0 MB)",
        "~ gpu-1 a (start → refuse (unplaceable))"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.sampled_from([None, ["gpu-1"], ["gpu-2"], ["gpu-1", "gpu-2"]]),
                          st.sampled_from([None, 512, 4096])), max_size=3, unique_by=lambda t: t[0]),
       st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.sampled_from([None, ["gpu-1"], ["gpu-2"], ["gpu-1", "gpu-2"]]),
                          st.sampled_from([None, 512, 4096])), max_size=3, unique_by=lambda t: t[0]))
def test_diff_properties(one, two) -> None:
    """No change from a set to itself; + and - swap when the diff is reversed; ~ stays ~."""
    def docs(spec):
        return NODES + tuple(role(n, 8001 + i, placement={"nodes": on} if on else None, ctx=ctx)
                             for i, (n, on, ctx) in enumerate(sorted(spec)))
    a, b = fleetview.view(fleet_of(*docs(one))), fleetview.view(fleet_of(*docs(two)))
    assert fleetdiff.diff(a, a) == ()
    forward = {(c.node, c.role, c.sign) for c in fleetdiff.diff(a, b)}
    back = {(c.node, c.role, {"+": "-", "-": "+"}.get(c.sign, c.sign))
            for c in fleetdiff.diff(b, a)}
    assert forward == back


def test_the_fleet_view_names_the_models_each_node_must_fetch() -> None:
    """§1.6 from the manifests alone: two fetching nodes get the sourced Model's role and
    list the fetch with its size; the third (no role there) fetches nothing."""
    sourced = model("src", size=4_400_000_000)
    del sourced["spec"]["root"]
    sourced["spec"]["source"] = {"hf": "org/src", "revision": "c" * 40}
    fetch = {"fetch": {"cache": "/var/cache/reconciler"}}
    on_gpu = {"node_selector": {"match_labels": {"gpu": "yes"}}}
    whole = fleet_of(node("n1", labels={"gpu": "yes"}, extra=fetch),
                     node("n2", labels={"gpu": "yes"}, extra=fetch),
                     node("n3", labels={"gpu": "no"}, extra=fetch), sourced,
                     role("coder", 8001, placement=on_gpu, model_name="src"))
    shown = fleetview.as_json(fleetview.view(whole))
    assert {n["node"]: n["fetches"] for n in shown["nodes"]} == {
        "n1": [{"model": "src", "bytes": 4_400_000_000}],
        "n2": [{"model": "src", "bytes": 4_400_000_000}], "n3": []}
    assert "  > fetch src  4.4 GB" in fleetview.text(fleetview.view(whole))


def test_a_reason_only_change_of_the_offline_plan_is_shown() -> None:
    """Rule (§10 fleet --diff): a role whose offline decision keeps its verb but changes its
    reason (refused for memory → refused for an exclusion) is a ~ line saying so."""
    before = (node("gpu-1", budget="1.5GB"), model(), role("a", 8002), role("b", 8001))
    excluding = role("b", 8001)
    excluding["spec"]["excludes"] = ["a"]
    after = (node("gpu-1", budget="1.5GB"), model(), role("a", 8002), excluding)
    assert diff(before, after) == ["~ gpu-1 a (refuse → refuse (excluded))",
                                   "~ gpu-1 b (excludes - → a)"]


def test_an_ollama_roles_model_and_address_changes_are_shown() -> None:
    """Rule (§10 fleet --diff): an Ollama role has no launch whose argv would say it, so a
    change of its model or of its address is named field by field."""
    other = {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": "l70"},
             "spec": {"format": "ollama", "source": {"ollama_tag": "llama3:70b"}}}
    base = (node("gpu-1", ports=(8000, 12000)), model(), OLLAMA_MODEL, other)
    moved = {**OLLAMA_ROLE, "spec": {**OLLAMA_ROLE["spec"], "model": "l70"}}
    assert diff(base + (OLLAMA_ROLE,), base + (moved,)) == ["~ gpu-1 ol (model l3 → l70)"]
    readdressed = {**OLLAMA_ROLE, "spec": {**OLLAMA_ROLE["spec"], "serve": {"port": 11435}}}
    assert diff(base + (OLLAMA_ROLE,), base + (readdressed,)) == [
        "~ gpu-1 ol (address 127.0.0.1:11434 → 127.0.0.1:11435)"]


def test_an_allowed_ports_change_is_shown_on_the_node() -> None:
    """Rule (§10 fleet --diff): a node whose allowed_ports change has a ~ line saying so."""
    before = (node("gpu-1", ports=(8000, 8999)), model(), role("a", 8001))
    after = (node("gpu-1", ports=(8000, 9999)), model(), role("a", 8001))
    assert diff(before, after) == ["~ gpu-1 (allowed_ports 8000-8999 → 8000-9999)"]
