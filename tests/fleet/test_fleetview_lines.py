"""§10 `reconcile fleet`: what a node's ledger would hold, and the roles it would refuse or not run.

The view is each node's offline plan (an empty node): a start and an Ollama load
both hold memory against the node's budget; a refused role is counted in the
closing line; a stopped role is shown as ``stopped``, not as a keep.
"""

from __future__ import annotations

from reconciler.fleet import fleetview
from reconciler.manifests import loader
from tests.fleet.test_offline import OLLAMA_MODEL, OLLAMA_ROLE
from tests.fleet.worlds import files, model, node, role


def _view(*docs):
    result = loader.load(files(*docs))
    assert result.ok, result.problems
    return fleetview.view(result.fleet)


def test_an_ollama_load_holds_memory_in_the_fleet_view_as_a_start_does() -> None:
    """§10 the memory a node's ledger would hold counts every role its offline plan loads (an
    Ollama tag, verb load) as well as those it starts."""
    ollama = {**OLLAMA_ROLE, "spec": {**OLLAMA_ROLE["spec"], "memory": {"weights": "3GB"}}}
    view = _view(node("gpu-1", budget="10GB", ports=(8000, 12000)), model(), OLLAMA_MODEL,
                 ollama, role("a", 8001))
    [gpu] = view.nodes
    assert {r.name: str(r.decision.verb) for r in gpu.roles} == {"a": "start", "ol": "load"}
    assert gpu.reserved == 4_000_000_000
    assert fleetview.as_json(view)["nodes"][0]["reserved"] == 4_000_000_000
    assert "gpu-1  4.0 GB of 10.0 GB" in fleetview.text(view)


def test_the_closing_line_counts_the_roles_a_node_would_refuse() -> None:
    """§10 a role its node's ledger would refuse (unplaceable: over the budget) is counted in
    the closing line, ``N refused``; the refusal's own row says ``refuse``."""
    view = _view(node("gpu-1", budget="2.5GB"), model(), role("a", 8001),
                 role("b", 8002, kv="1GB"))
    text = fleetview.text(view)
    assert text.endswith("Fleet: 1 node, 2 roles placed, 1 refused.\n"), text
    assert "refuse (unplaceable" in text


def test_the_closing_line_counts_a_role_with_replicas_once_with_its_instances() -> None:
    """§12/§10 a role with ``replicas: 3`` is one role placed, of three instances (each its
    own row); a fleet with no replicas says nothing of instances."""
    chat = role("chat", 8001)
    chat["spec"]["replicas"] = 3
    text = fleetview.text(_view(node("gpu-1"), model(), chat, role("solo", 8010)))
    assert text.endswith("Fleet: 1 node, 2 roles placed (4 instances).\n"), text
    assert sum(" chat/" in line for line in text.splitlines()) == 2, text
    plain = fleetview.text(_view(node("gpu-1"), model(), role("solo", 8010)))
    assert plain.endswith("Fleet: 1 node, 1 role placed.\n"), plain


def test_a_stopped_role_is_shown_stopped_not_kept() -> None:
    """§10 a role with ``state: stopped`` is shown as what the node does with it: ``stopped``
    (its offline plan keeps it absent), beside the roles it starts."""
    text = fleetview.text(_view(node("gpu-1"), model(), role("a", 8001),
                                role("c", 8003, state="stopped")))
    [row] = [line for line in text.splitlines() if " c " in line]
    assert row.endswith("  stopped") and "keep" not in row, row


def test_two_roles_on_one_device_add_up_and_each_role_names_its_device() -> None:
    """§7.1/§10 a device's reserved memory in the fleet view is the sum of every role placed on
    it, and each role's JSON row names the devices it got."""
    devices = {"devices": [{"id": "cuda:0", "memory": "24GB"}]}
    docs = [node("gpu-1", extra=devices), model()]
    for i, name in enumerate(("chat", "coder")):
        r = role(name, 8001 + i, placement={"devices": {"count": 1}})
        r["spec"]["memory"] = {"weights": "8GB"}
        docs.append(r)
    view = _view(*docs)
    assert view.nodes[0].devices == (("cuda:0", 16 * 10**9, 24 * 10**9),)
    rows = fleetview.as_json(view)["nodes"][0]["roles"]
    assert [(r["role"], r["devices"]) for r in rows] == [("chat", ["cuda:0"]),
                                                          ("coder", ["cuda:0"])]


def test_a_set_without_a_nodeconfig_is_shown_as_this_node() -> None:
    """§10 a manifest set with no NodeConfig is one implicit node: ``reconcile fleet`` heads its
    lines ``(this node)``, not an empty name."""
    text = fleetview.text(_view(model(), role("a", 8001)))
    assert text.startswith("(this node)  "), text
