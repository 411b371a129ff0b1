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
    """§10/§7.1 ``reconcile fleet``: roles go to the node their labels pick, then onto its devices;
    a role that fits none is refused; text and JSON show the devices."""
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


def _devices(*gb: int) -> dict:
    return {"devices": [{"id": f"cuda:{i}", "memory": f"{g}GB"} for i, g in enumerate(gb)]}


def test_each_node_placed_on_its_own_devices() -> None:
    """Nodes with the same devices and roles are placed once (nodecheck's memo), yet each
    node's warning is its own: a node with other devices, or other roles, is placed anew."""
    docs = [node("small-1", labels={"gpu": "yes"}, extra=_devices(24, 24)),
            node("small-2", labels={"gpu": "yes"}, extra=_devices(24, 24)),
            node("big-1", labels={"gpu": "yes"}, extra=_devices(48, 48)),
            node("small-3", labels={"gpu": "few"}, extra=_devices(24, 24)), model()]
    for i, (name, where) in enumerate((("chat", "yes"), ("coder", "yes"), ("voice", "yes"),
                                       ("few", "few"))):
        r = role(name, 8001 + i, placement={"node_selector": {"match_labels": {"gpu": where}},
                                            "devices": {"count": 1}})
        r["spec"]["memory"] = {"weights": "20GB"}
        docs.append(r)
    result = loader.load(files(*docs), node=None)
    assert result.fleet is not None, result.problems
    short = [w.message for w in result.warnings if "do not all fit its devices" in w.message]
    assert len(short) == 2, short  # not big-1 (room for all three), not small-3 (one role)
    assert "node 'small-1'" in short[0] and "node 'small-2'" in short[1], short
    assert all("voice needs 20.0 GB" in m for m in short), short
