"""§7.1 §10 the fleet with devices: labels pick the node, devices within it; fleet shows reserved/total."""

from __future__ import annotations

from reconciler.fleet import fleetview
from reconciler.manifests import loader
from tests.fleet.worlds import files, model, node, role

DEVICES = {"devices": [{"id": "cuda:0", "memory": "24GB"}, {"id": "cuda:1", "memory": "24GB"}]}


def _view():
    docs = [node("a100-1", labels={"gpu": "a100"}, extra=DEVICES), node("cpu-1"), model()]
    for i, name in enumerate(("chat", "coder", "voice")):
        r = role(name, 8001 + i, placement={"node_selector": {"match_labels": {"gpu": "a100"}},
                                            "devices": {"count": 1}})
        r["spec"]["memory"] = {"weights": "20GB"}
        docs.append(r)
    result = loader.load(files(*docs), node=None)
    assert result.fleet is not None, result.problems
    return result, fleetview.view(result.fleet)


def test_roles_go_to_the_labelled_node_then_onto_its_devices() -> None:
    result, view = _view()
    gpu = view.node("a100-1")
    assert [(r.name, [d for d, _ in r.decision.devices], str(r.decision.verb)) for r in gpu.roles] \
        == [("chat", ["cuda:0"], "start"), ("coder", ["cuda:1"], "start"), ("voice", [], "refuse")]
    assert view.node("cpu-1").roles == ()
    assert gpu.devices == (("cuda:0", 20 * 10**9, 24 * 10**9), ("cuda:1", 20 * 10**9, 24 * 10**9))
    text = fleetview.text(view)
    assert "  devices: cuda:0 20.0 GB/24.0 GB, cuda:1 20.0 GB/24.0 GB" in text, text
    shown = fleetview.as_json(view)["nodes"][0]
    assert shown["devices"][0] == {"device": "cuda:0", "reserved": 20 * 10**9, "memory": 24 * 10**9}
    # validate warns, on the NodeConfig, that the always-on roles do not all fit its devices.
    assert any("do not all fit its devices" in str(w) for w in result.warnings)
