"""Which node is mine, and each node's share: placement before plan() (§10)."""

from __future__ import annotations

import pytest

from reconciler.manifests import loader
from reconciler.manifests.fleet import NodeChoice
from tests.fleet.worlds import files, model, node, role


def load(*docs, choice: NodeChoice | None = None):
    return loader.load(files(*docs), node=choice)


def names(desired) -> list[str]:
    return [r.name for r in desired.roles]


def test_a_single_nodeconfig_is_this_node_whatever_its_name() -> None:
    """Without --node or $RECONCILER_NODE, a set with one NodeConfig runs here as before."""
    result = load(node("test-node"), model(), role("a", 8001),
                  choice=NodeChoice(name="some-host", explicit=False))
    assert result.desired is not None and result.desired.node.name == "test-node"
    assert names(result.desired) == ["a"]


def test_an_explicit_name_must_match() -> None:
    """--node names a node; a single NodeConfig of another name is not this node."""
    result = load(node("test-node"), model(), role("a", 8001),
                  choice=NodeChoice(name="other", explicit=True))
    assert result.ok and result.desired is None


def test_among_many_the_host_name_picks() -> None:
    """With several NodeConfigs the one named like this node is mine; none → not a member."""
    docs = (node("gpu-1"), node("gpu-2"), model(), role("a", 8001))
    assert load(*docs, choice=NodeChoice(name="gpu-2")).desired.node.name == "gpu-2"
    assert load(*docs, choice=NodeChoice(name="gpu-3")).desired is None
    assert load(*docs).desired is None  # no choice at all: no node is "mine"


def test_without_nodeconfig_the_implicit_node_has_my_name() -> None:
    """A set without NodeConfig has one node of every default, named like this node."""
    result = load(model(), role("a", 8001, placement={"nodes": ["box"]}),
                  choice=NodeChoice(name="box", explicit=True))
    assert result.desired.node.name == "box" and names(result.desired) == ["a"]


def test_nodes_and_selector_must_both_hold() -> None:
    """A role with nodes and a node_selector lands only where both match."""
    docs = (node("gpu-1", labels={"pool": "a"}), node("gpu-2", labels={"pool": "a"}),
            node("gpu-3", labels={"pool": "b"}), model(),
            role("x", 8001, placement={"nodes": ["gpu-2", "gpu-3"],
                                       "node_selector": {"match_labels": {"pool": "a"}}}),
            role("y", 8002))
    on = {n: names(load(*docs, choice=NodeChoice(name=n, explicit=True)).desired)
          for n in ("gpu-1", "gpu-2", "gpu-3")}
    assert on == {"gpu-1": ["y"], "gpu-2": ["x", "y"], "gpu-3": ["y"]}


def test_a_role_placed_elsewhere_is_named_with_its_nodes() -> None:
    """A node's share lists the set's other roles and where they run (for the plan's reason)."""
    docs = (node("gpu-1"), node("gpu-2"), node("gpu-3"), model(),
            role("x", 8001, placement={"nodes": ["gpu-2", "gpu-3"]}),
            role("z", 8002, placement={"nodes": ["gpu-9"]}))
    desired = load(*docs, choice=NodeChoice(name="gpu-1", explicit=True)).desired
    assert desired.roles == ()
    assert desired.placed_elsewhere == (("x", ("gpu-2", "gpu-3")), ("z", ()))


def test_node_defaults_and_model_roots_are_per_node() -> None:
    """Restart policy and model roots come from the node the role runs on."""
    docs = (node("gpu-1", extra={"restart": {"max_restarts": 2}}),
            node("gpu-2", extra={"model_roots": {"qwen": "/data/qwen"}}),
            model(root="/srv/models"), role("x", 8001))
    one = load(*docs, choice=NodeChoice(name="gpu-1", explicit=True)).desired
    two = load(*docs, choice=NodeChoice(name="gpu-2", explicit=True)).desired
    assert one.roles[0].restart.max_restarts == 2 and two.roles[0].restart.max_restarts == 5
    assert one.model("qwen").root == "/srv/models" and two.model("qwen").root == "/data/qwen"
    assert one.model("qwen").shards == two.model("qwen").shards  # the same files, verified alike


@pytest.mark.parametrize("labels", [{"pool": "a"}, {}])
def test_relabelling_a_node_moves_a_selected_role(labels) -> None:
    """A label-selected role follows the label."""
    docs = (node("gpu-1", labels=labels), model(),
            role("x", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}}))
    desired = load(*docs, choice=NodeChoice(name="gpu-1", explicit=True)).desired
    assert names(desired) == (["x"] if labels else [])
