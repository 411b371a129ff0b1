"""manifests/examples/fleet/: a valid three-node fleet whose placement reads as its comments say."""

from __future__ import annotations

from pathlib import Path

from reconciler.fleet import fleetview
from reconciler.repo import sources
from reconciler.manifests.fleet import NodeChoice

FLEET = Path(__file__).parents[2] / "manifests" / "examples" / "fleet"


def test_the_fleet_example_is_valid_without_warnings() -> None:
    """Three NodeConfigs, their Models and roles: no problem, no warning."""
    result = sources.load_desired([str(FLEET)])
    assert result.problems == () and result.warnings == ()
    assert result.summary == "10 documents: 3 Model, 3 InferenceSpec, 3 NodeConfig, 1 Rollout"


def test_each_node_runs_what_its_labels_select() -> None:
    """vram Gt 40 → gpu-1; pool small without os → gpu-2 (its two instances, §12);
    nodes [mac-1] → mac-1."""
    view = fleetview.view(sources.load_desired([str(FLEET)]).fleet)
    assert {n.name: [r.name for r in n.roles] for n in view.nodes} == {
        "gpu-1": ["big-coder"], "gpu-2": ["small-coder", "small-coder/1"],
        "mac-1": ["mac-chat"]}
    assert all(r.decision.verb == "start" for n in view.nodes for r in n.roles)


def test_model_roots_move_a_model_on_one_node_only() -> None:
    """gpu-2 serves the coder model from its own disk; the Model itself is unchanged."""
    two = sources.load_desired([str(FLEET)], node=NodeChoice(name="gpu-2", explicit=True))
    one = sources.load_desired([str(FLEET)], node=NodeChoice(name="gpu-1", explicit=True))
    name = "qwen2.5-coder-7b-q4"
    assert two.desired.model(name).root == "/data/models/qwen2.5-coder-7b"
    assert one.desired.model(name).root == "/srv/models/qwen2.5-coder-7b"
