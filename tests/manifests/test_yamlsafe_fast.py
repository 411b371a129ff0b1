"""libyaml's events read a file exactly as PyYAML's pure-Python parser does (yamlsafe)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from reconciler.manifests import yamlsafe

HERE = Path(__file__).parent


def _utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False  # refused before any parser sees it
    return True


FILES = [p for p in sorted((HERE / "invalid").glob("*.yaml")) + sorted(
    (HERE.parents[1] / "manifests" / "examples").glob("*.yaml")) if _utf8(p)]

pytestmark = pytest.mark.skipif(yamlsafe._FastLoader is None, reason="PyYAML without libyaml")


def both(text: str):
    slow = yamlsafe._documents("f.yaml", text, yamlsafe._Loader)
    try:
        fast = yamlsafe._documents("f.yaml", text, yamlsafe._FastLoader)
    except yaml.YAMLError:
        fast = None  # parse() then takes the Python path: the same answer by construction
    return slow, fast


def shape(result):
    docs, problems = result
    return [(d.line, d.value, dict(d.lines), d.broken) for d in docs], problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_case_and_example_reads_the_same(path: Path) -> None:
    """Each golden case and example: the same documents, lines and problems either way."""
    text = path.read_bytes().decode("utf-8")
    slow, fast = both(text)
    if fast is not None:
        assert shape(fast) == shape(slow)
    assert shape(yamlsafe.parse("f.yaml", text.encode())) == shape(slow)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                    st.sampled_from(["on", "off", "yes", "~", "1e3", "0x1f", "2021-01-01", "a: b"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=3), st.booleans(), st.sampled_from([1, 2, 4]))
def test_generated_yaml_reads_the_same(values, flow, indent) -> None:
    """Any YAML PyYAML writes (block or flow, any indent) reads the same through libyaml."""
    text = yaml.safe_dump_all(values, default_flow_style=flow, indent=max(indent, 2),
                              allow_unicode=True)
    slow, fast = both(text)
    assert fast is not None and shape(fast) == shape(slow)


def _nested(depth: int, flow: bool) -> str:
    """A document whose deepest node is ``depth`` levels down (the root is level 1)."""
    if flow:
        return "a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"
    return "".join(f"{' ' * i}k:\n" for i in range(depth - 1)) + " " * (depth - 1) + "x\n"


@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
@pytest.mark.parametrize("depth", [yamlsafe.MAX_DEPTH - 1, yamlsafe.MAX_DEPTH,
                                   yamlsafe.MAX_DEPTH + 1, 200, 1200])
def test_depth_limit_told_alike(depth: int, flow: bool) -> None:
    """libyaml's composer has no 64-level limit: at and past it, parse() tells what _Loader does."""
    text = _nested(depth, flow)
    slow = yamlsafe._documents("f.yaml", text, yamlsafe._Loader)
    assert shape(yamlsafe.parse("f.yaml", text.encode())) == shape(slow)
    refused = any("nested more than" in p.message for p in slow[1])
    assert refused == (depth > yamlsafe.MAX_DEPTH)


@pytest.mark.parametrize("text", [
    "a: &x [[[1]]]\nb: " + "[" * 62 + "*x" + "]" * 62 + "\n",  # aliases nest deeper than written
    "a: &x [1]\nb: " + "[" * 63 + "*x" + "]" * 63 + "\n",
    "a: &a [*a]\n",  # an alias inside its own anchor
    "a: 1\na: " + "[" * 80 + "]" * 80 + "\n",  # too deep, under a duplicate key
    "? " + "[" * 80 + "]" * 80 + "\n: 1\n",  # too deep, in a key
    "a: 1\n---\nb: [1\n",  # a YAML error in the second document
    "a: &x 1\nb: &x 2\n",  # a repeated anchor
    "a: !!python/object x\n", "a: 1\nb: 2\na: 3\n", "1: x\n", "<<: {a: 1}\n",
])
def test_whatever_the_builder_reports_is_told_by_the_python_path(text: str) -> None:
    """A file _Builder or libyaml finds anything in reads exactly as through _Loader."""
    slow = yamlsafe._documents("f.yaml", text, yamlsafe._Loader)
    assert slow[1], "each case is a problem"
    assert shape(yamlsafe.parse("f.yaml", text.encode())) == shape(slow)


@pytest.mark.parametrize("extra", [61, 62, 63])
def test_an_alias_at_the_depth_limit(extra: int) -> None:
    """An alias expanded right at the limit (clean or not): parse() reads it as _Loader does."""
    text = "a: &x [1]\nb: " + "[" * extra + "*x" + "]" * extra + "\n"
    slow = yamlsafe._documents("f.yaml", text, yamlsafe._Loader)
    assert shape(yamlsafe.parse("f.yaml", text.encode())) == shape(slow)
    assert bool(slow[1]) == (extra == 63)


def test_a_clean_fleet_takes_the_fast_path(tmp_path: Path) -> None:
    """The benchmark's files compose in C: no file falls back to the Python composer."""
    import sys
    sys.path.insert(0, str(HERE.parents[1] / "bench"))
    import bench_fleet
    bench_fleet.write_fleet(tmp_path / "f", 30, devices=True)
    for path in sorted((tmp_path / "f").glob("*.yaml")):
        text = path.read_text()
        fast = yamlsafe._documents(path.name, text, yamlsafe._FastLoader)
        assert fast[0] and shape(fast) == shape(yamlsafe._documents(path.name, text, yamlsafe._Loader))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=12), st.sampled_from(
    ["", "~", "null", "Null", "true", "No", "on", "0x1f", "0o17", "1_000", "-.inf", ".NaN", "1e3",
     "2021-01-01", "2021-01-01 10:00:00", "<<", "=", "1:20", "+1", "!x", "&a", "*a"])),
       st.booleans(), st.booleans())
def test_scalar_tags_resolve_alike(value: str, plain: bool, quoted: bool) -> None:
    """_FastLoader's resolve (its table built once) tags every scalar as PyYAML's Resolver does."""
    from yaml.nodes import ScalarNode
    from yaml.resolver import Resolver
    fast = yamlsafe._FastLoader("")
    assert fast.resolve(ScalarNode, value, (plain, quoted)) == \
        Resolver().resolve(ScalarNode, value, (plain, quoted))
