"""``reconcile validate`` checks every node's world (§10): problems and warnings per node."""

from __future__ import annotations

from reconciler.manifests import loader
from tests.fleet.worlds import files, model, node, role


def problems(*docs) -> list[str]:
    return [f"{p.path}: {p.message}" for p in loader.load(files(*docs)).problems]


def warnings(*docs) -> list[str]:
    result = loader.load(files(*docs))
    assert result.ok, result.problems
    return [f"{p.path}: {p.message}" for p in result.warnings]


def test_one_port_on_two_nodes_is_fine_on_one_node_a_clash() -> None:
    """Roles may share a port on different nodes; on one node the clash names the node."""
    apart = (node("gpu-1"), node("gpu-2"), model(),
             role("a", 8001, placement={"nodes": ["gpu-1"]}),
             role("b", 8001, placement={"nodes": ["gpu-2"]}))
    assert problems(*apart) == []
    together = (node("gpu-1"), node("gpu-2"), model(),
                role("a", 8001, placement={"nodes": ["gpu-1"]}), role("b", 8001))
    [clash] = problems(*together)
    assert clash.startswith("$.spec.serve.port: 127.0.0.1:8001 is also the address of role 'a'")
    assert "on node gpu-1;" in clash


def test_ports_are_checked_against_each_nodes_allowed_ports() -> None:
    """A port outside the allowed_ports of a node it is placed on is an error naming the node."""
    docs = (node("gpu-1", ports=(8000, 8999)), node("gpu-2", ports=(9000, 9999)), model(),
            role("a", 8500), role("b", 9500, placement={"nodes": ["gpu-2"]}))
    assert problems(*docs) == [
        "$.spec.serve.port: port 8500 is outside allowed_ports 9000-9999 of node gpu-2"]


def test_a_problem_on_many_nodes_is_said_once() -> None:
    """One role outside the ports of several nodes is one problem listing them."""
    docs = [node(f"n{i}", ports=(9000, 9999)) for i in range(7)] + [model(), role("a", 8500)]
    [one] = problems(*docs)
    assert one.endswith("of nodes n0, n1, n2, n3, n4 and 2 more")


def test_duplicate_node_names_are_an_error() -> None:
    """Two NodeConfigs of one name: an error at the second."""
    [dup] = problems(node("gpu-1"), node("gpu-1", labels={"a": "b"}))
    assert dup.startswith("$.metadata.name: duplicate NodeConfig name 'gpu-1' (first at ")


def test_always_on_footprints_over_a_nodes_budget_warn() -> None:
    """Always-on roles that cannot all fit a node's budget: a warning at its memory_budget."""
    docs = (node("gpu-1", budget="2.5GB"), node("gpu-2", budget="10GB"), model(size=1_000_000_000),
            role("a", 8001, kv="1GB"), role("b", 8002), role("c", 8003, state="stopped"))
    assert warnings(*docs) == [
        "$.spec.memory_budget: the always-on roles placed on node 'gpu-1' need 3.0 GB, more "
        "than its memory_budget 2.5 GB: not all of them can run at once (a 2.0 GB, b 1.0 GB)"]


def test_a_role_matching_no_node_warns() -> None:
    """A placement that matches no node is a warning, and so is a node name nobody has."""
    docs = (node("gpu-1", labels={"pool": "a"}), model(),
            role("x", 8001, placement={"nodes": ["gpu-7"]}))
    assert warnings(*docs) == [
        "$.spec.placement: matches no node, so no node runs it (nodes: gpu-1)",
        "$.spec.placement.nodes[0]: no NodeConfig named 'gpu-7'"]


def test_selector_labels_no_node_has_warn_unless_absence_is_the_point() -> None:
    """In/Exists/match_labels on a label no node has warn; NotIn/DoesNotExist do not."""
    expressions = [{"key": "gpu", "operator": "Exists"},
                   {"key": "maintenance", "operator": "DoesNotExist"},
                   {"key": "zone", "operator": "NotIn", "values": ["x"]}]
    docs = (node("gpu-1", labels={"pool": "a"}), model(),
            role("x", 8001, placement={"node_selector": {"match_labels": {"poll": "a"},
                                                         "match_expressions": expressions}}))
    assert warnings(*docs) == [  # in file order
        "$.spec.placement: matches no node, so no node runs it (nodes: gpu-1)",
        "$.spec.placement.node_selector.match_labels.poll: no node has the label 'poll'",
        "$.spec.placement.node_selector.match_expressions[0].key: no node has the label 'gpu'"]


def test_selector_operators_need_their_values() -> None:
    """In without values, Exists with values, Gt with a non-integer: errors at the term."""
    expressions = [{"key": "pool", "operator": "In"},
                   {"key": "pool", "operator": "Exists", "values": ["a"]},
                   {"key": "vram", "operator": "Gt", "values": ["lots"]}]
    docs = (node("gpu-1"), model(),
            role("x", 8001, placement={"node_selector": {"match_expressions": expressions}}))
    assert problems(*docs) == [
        "$.spec.placement.node_selector.match_expressions[0].operator: In needs at least one value",
        "$.spec.placement.node_selector.match_expressions[1].values: Exists takes no values",
        "$.spec.placement.node_selector.match_expressions[2].values[0]: Gt compares integers: "
        "'lots' is not a 64-bit integer"]


def test_labels_are_strings_with_kubernetes_syntax() -> None:
    """A number as a label value, or a bad key, is an error saying what a label looks like."""
    [number] = problems(node("gpu-1", labels={"vram": 48}))
    assert number.startswith("$.metadata.labels.vram: must be a label value")
    assert number.endswith("(YAML read it as a number or boolean: quote it)")
    [key] = problems(node("gpu-1", labels={"-bad": "x"}))
    assert key.startswith("$.metadata.labels[\"-bad\"]: label key '-bad': the name must be")


def test_model_roots_name_models_with_roots() -> None:
    """model_roots must name a Model, and not an Ollama one."""
    ollama = {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": "ol"},
              "spec": {"format": "ollama", "source": {"ollama_tag": "llama3:8b"}}}
    docs = (node("gpu-1", extra={"model_roots": {"nope": "/x", "ol": "/y", "qwen": "/z"}}),
            model(), ollama)
    assert problems(*docs) == [
        "$.spec.model_roots.nope: no Model named 'nope'",
        "$.spec.model_roots.ol: Model 'ol' is an Ollama model: Ollama keeps its files, "
        "there is no root to move"]


def test_a_negative_gt_bound_is_refused_at_its_file_and_line() -> None:
    """Rule (labels.NewRequirement): ``values: ["-1"]`` under Gt is no label value; the set is
    refused with FILE:LINE: $.path, and nothing is placed on a node labelled "0"."""
    expressions = [{"key": "vram", "operator": "Gt", "values": ["-1"]}]
    docs = (node("gpu-1", labels={"vram": "0"}), model(),
            role("x", 8001, placement={"node_selector": {"match_expressions": expressions}}))
    result = loader.load(files(*docs))
    assert result.desired is None
    [problem] = result.problems
    assert problem.file and problem.line > 0
    assert f"{problem.path}: {problem.message}".startswith(
        "$.spec.placement.node_selector.match_expressions[0].values[0]: Gt compares integers "
        "written as label values: label value '-1' must be")


def test_footprints_exactly_equal_to_the_budget_fit_without_a_warning() -> None:
    """Rule (§7: exactly the budget fits): always-on roles whose footprints add up to the
    memory_budget exactly are no warning; one byte more is. So is an on-demand role's own
    footprint exactly equal to the budget (it can start)."""
    docs = (node("gpu-1", budget="3000000000"), model(size=1_000_000_000),
            role("a", 8001, kv="1GB"), role("b", 8002))
    assert warnings(*docs) == []
    over = (node("gpu-1", budget="2999999999"), model(size=1_000_000_000),
            role("a", 8001, kv="1GB"), role("b", 8002))
    assert [w.split(":")[0] for w in warnings(*over)] == ["$.spec.memory_budget"]
    router = node("gpu-1", budget="2000000000", extra={"router": {"listen": "127.0.0.1:9000"}})
    assert warnings(router, model(size=1_000_000_000), role("a", 8001, kv="1GB", state="on-demand")) == []


def test_nodes_with_the_same_roles_are_each_checked() -> None:
    """nodecheck works out a role set's collisions and footprints once, yet every node with
    that set is named, and each node's budget is its own."""
    docs = (node("a-1", labels={"pool": "a"}, budget="3GB"),
            node("a-2", labels={"pool": "a"}, budget="1GB"),
            node("a-3", labels={"pool": "a"}, budget="1GB"),
            node("b-1", labels={"pool": "b"}, budget="1GB"), model(),
            role("x", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}}),
            role("y", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}}),
            role("z", 8002, placement={"node_selector": {"match_labels": {"pool": "b"}}}))
    [clash] = problems(*docs)
    assert clash.startswith("$.spec.serve.port: 127.0.0.1:8001 is also the address of role 'x'")
    assert "on nodes a-1, a-2, a-3;" in clash, clash
    apart = docs[:-3] + (role("x", 8001, placement={"node_selector": {"match_labels": {"pool": "a"}}}),
                         role("y", 8003, placement={"node_selector": {"match_labels": {"pool": "a"}}}),
                         role("z", 8002, placement={"node_selector": {"match_labels": {"pool": "b"}}}))
    over = [w for w in warnings(*apart) if "memory_budget" in w]
    assert [w.split("node ")[1].split(" ")[0] for w in over] == ["'a-2'", "'a-3'"], over
