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
