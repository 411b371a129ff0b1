"""Label selectors: Kubernetes semantics, operator by operator, and as properties."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from reconciler.core.labels import (
    Operator,
    Requirement,
    Selector,
    key_problem,
    requirement_problem,
    selector,
    value_problem,
)

KEYS = st.sampled_from(["pool", "gpu", "vram", "zone", "example.com/tier"])
VALUES = st.sampled_from(["a", "b", "c", "24", "48", "080", "-3", "x1", ""])
LABELS = st.dictionaries(KEYS, VALUES, max_size=5)


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key=key, operator=Operator(op), values=values)


@pytest.mark.parametrize("op, values, labels, want", [
    ("In", ("a", "b"), {"pool": "a"}, True),
    ("In", ("a", "b"), {"pool": "c"}, False),
    ("In", ("a",), {}, False),
    ("NotIn", ("a",), {"pool": "b"}, True),
    ("NotIn", ("a",), {"pool": "a"}, False),
    ("NotIn", ("a",), {}, True),  # absent counts as not in
    ("Exists", (), {"pool": ""}, True),  # an empty value is still a label
    ("Exists", (), {}, False),
    ("DoesNotExist", (), {}, True),
    ("DoesNotExist", (), {"pool": "a"}, False),
    ("Gt", ("16",), {"pool": "24"}, True),
    ("Gt", ("24",), {"pool": "24"}, False),  # strictly greater
    ("Gt", ("16",), {"pool": "big"}, False),  # not an integer: no match, no error
    ("Gt", ("16",), {}, False),
    ("Lt", ("16",), {"pool": "8"}, True),
    ("Lt", ("16",), {"pool": "16"}, False),
    ("Lt", ("0",), {"pool": "-3"}, True),  # a signed value reads as an integer, as ParseInt does
    ("Gt", ("-5",), {"pool": "0"}, True),
    ("Gt", ("1",), {"pool": "99999999999999999999"}, False),  # beyond int64: not an integer
])
def test_each_operator(op, values, labels, want) -> None:
    """Each operator decides as Kubernetes' labels.Requirement does."""
    assert req("pool", op, *values).matches(labels) is want


@given(LABELS, KEYS, VALUES)
def test_match_labels_is_in_with_one_value(labels, key, value) -> None:
    """match_labels {k: v} matches exactly when the label k is present with value v."""
    assert selector({key: value}).matches(labels) is (labels.get(key) == value)


@given(LABELS, KEYS, st.lists(VALUES, min_size=1, max_size=3))
def test_not_in_is_the_negation_of_in(labels, key, values) -> None:
    """NotIn matches exactly where In does not (absent labels included)."""
    assert req(key, "NotIn", *values).matches(labels) is not req(key, "In", *values).matches(labels)


@given(LABELS, KEYS)
def test_does_not_exist_is_the_negation_of_exists(labels, key) -> None:
    """DoesNotExist matches exactly where Exists does not."""
    assert req(key, "DoesNotExist").matches(labels) is (key not in labels)
    assert req(key, "Exists").matches(labels) is (key in labels)


@given(LABELS, KEYS, st.integers(-100, 100))
def test_gt_and_lt_compare_integers(labels, key, bound) -> None:
    """Gt/Lt hold only for integer label values, compared as numbers (not as text)."""
    value = labels.get(key)
    number = int(value) if value is not None and value.lstrip("+-").isdigit() else None
    assert req(key, "Gt", str(bound)).matches(labels) is (number is not None and number > bound)
    assert req(key, "Lt", str(bound)).matches(labels) is (number is not None and number < bound)


@given(LABELS, st.lists(st.tuples(KEYS, st.sampled_from(list(Operator)), VALUES), max_size=4),
       st.randoms())
def test_a_selector_is_the_and_of_its_requirements_in_any_order(labels, terms, rnd) -> None:
    """Every requirement must hold; their order does not matter; none at all matches all."""
    reqs = [Requirement(key=k, operator=op,
                        values=() if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) else (v,))
            for k, op, v in terms]
    want = all(r.matches(labels) for r in reqs)
    shuffled = list(reqs)
    rnd.shuffle(shuffled)
    assert Selector(requirements=tuple(reqs)).matches(labels) is want
    assert Selector(requirements=tuple(shuffled)).matches(labels) is want
    if not reqs:
        assert want is True


@pytest.mark.parametrize("op, values, problem", [
    ("In", (), "In needs at least one value"),
    ("NotIn", (), "NotIn needs at least one value"),
    ("Exists", ("a",), "Exists takes no values"),
    ("DoesNotExist", ("a",), "DoesNotExist takes no values"),
    ("Gt", (), "Gt takes exactly one value, an integer"),
    ("Lt", ("1", "2"), "Lt takes exactly one value, an integer"),
    ("Gt", ("4.5",), "Gt compares integers: '4.5' is not a 64-bit integer"),
    ("Gt", ("9223372036854775808",), "Gt compares integers: '9223372036854775808' is not a 64-bit integer"),
    ("Lt", ("-9223372036854775809",), "Lt compares integers written as label values: label value "
     "'-9223372036854775809' must be at most 63 characters, letters, digits, '-', '_' or '.', "
     "beginning and ending with a letter or digit"),
])
def test_operator_values_are_checked(op, values, problem) -> None:
    """Operators get the values Kubernetes requires of them, or a message saying why not."""
    found = requirement_problem(Operator(op), values)
    assert found is not None and found[1] == problem


@pytest.mark.parametrize("op, values", [
    ("In", ("a", "")), ("NotIn", ("b",)), ("Exists", ()), ("DoesNotExist", ()),
    ("Gt", ("0",)), ("Lt", ("48",)), ("Gt", ("9223372036854775807",)), ("Lt", ("007",)),
    ("Gt", ("0000000000000000000001",)),  # strconv.ParseInt reads leading zeros
])
def test_operator_values_that_are_fine(op, values) -> None:
    """Well-formed operator values raise no problem."""
    assert requirement_problem(Operator(op), values) is None


@pytest.mark.parametrize("key, ok", [
    ("gpu", True), ("example.com/gpu", True), ("a.b-c_d", True), ("x" * 63, True),
    ("x" * 64, False), ("-gpu", False), ("gpu-", False), ("Example.com/gpu", False),
    ("/gpu", False), ("a/b/c", False), ("gp u", False),
])
def test_label_keys(key, ok) -> None:
    """Label keys follow Kubernetes' qualified names: [DNS-subdomain/]name."""
    assert (key_problem(key) is None) is ok


@pytest.mark.parametrize("value, ok", [
    ("", True), ("a", True), ("48", True), ("a.b_c-d", True), ("x" * 63, True),
    ("x" * 64, False), ("-a", False), ("a b", False), ("a/b", False),
])
def test_label_values(value, ok) -> None:
    """Label values are empty or 1-63 characters, alphanumeric at both ends."""
    assert (value_problem(value) is None) is ok


@pytest.mark.parametrize("bound", ["-1", "+1", "-0", "1 ", "1-"])
def test_a_gt_lt_bound_must_be_a_label_value(bound) -> None:
    """Rule (Kubernetes' labels.NewRequirement): a Gt/Lt bound is an integer that is also a
    valid label value; ``-1`` parses as an integer but is no label value, so it is refused."""
    found = requirement_problem(Operator.GT, (bound,))
    assert found is not None and found[0] == 0
    assert "label value" in found[1]


@pytest.mark.parametrize("bound, ok", [
    ("9223372036854775807", True), ("9223372036854775808", False),  # 2^63 - 1, 2^63
    ("99999999999999999999", False),
])
def test_a_gt_lt_bound_is_a_64_bit_signed_integer(bound, ok) -> None:
    """Rule: Gt/Lt compare 64-bit signed integers: 2^63 - 1 is one, 2^63 is not (refused as a
    bound, and a node label of 2^63 never matches)."""
    assert (requirement_problem(Operator.LT, (bound,)) is None) is ok
    assert req("pool", "Gt", "0").matches({"pool": bound}) is ok
    assert req("pool", "Lt", bound).matches({"pool": "1"}) is ok


@pytest.mark.parametrize("text", ["a\n", "gpu\n", "a\x85", "48\n"])
def test_label_syntax_is_anchored_at_both_ends(text) -> None:
    """Rule: a label key, value or Gt/Lt bound is the whole text: a trailing newline (which a
    regex `$` lets through) or a control character makes it none."""
    assert value_problem(text) is not None
    assert key_problem(text) is not None
    assert requirement_problem(Operator.GT, (text,)) is not None


NODE_NAMES = st.sampled_from(["n1", "n2", "n3", "n4"])
REQUIREMENTS = st.builds(
    lambda key, op, values: req(key, op, *(values[:1] if op in ("Gt", "Lt") else
                                          () if op in ("Exists", "DoesNotExist") else values)),
    KEYS, st.sampled_from([str(o) for o in Operator]), st.lists(VALUES, min_size=1, max_size=2))


@given(st.lists(st.tuples(NODE_NAMES, LABELS), max_size=8),
       st.lists(st.tuples(st.none() | st.frozensets(NODE_NAMES),
                          st.none() | st.lists(REQUIREMENTS, max_size=3)), max_size=4))
def test_placements_are_each_nodes_own(nodes, placements) -> None:
    """fleet.placements asks a selector once per label set: the same nodes as asking each node."""
    from reconciler.core.desired import Mode, NodeConfig, RoleSpec, Runtime
    from reconciler.manifests.fleet import FleetRole, Placement, placements as place

    configs = [NodeConfig(name=name, labels=tuple(sorted(labels.items()))) for name, labels in nodes]
    roles = [FleetRole(spec=RoleSpec(name=f"r{i}", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED),
                       placement=None if only is None and terms is None else Placement(
                           nodes=only, selector=None if terms is None else
                           Selector(requirements=tuple(terms))))
             for i, (only, terms) in enumerate(placements)]
    placed = place(roles, configs)
    for role in roles:
        want = tuple(n.name for n in configs if role.placement is None
                     or role.placement.admits(n.name, dict(n.labels)))
        assert placed[role.spec.name] == want
