"""The ``$.path`` of a problem: one step per key, and never a raw control character."""

from __future__ import annotations

import pytest

from reconciler.core.errors import json_path


def test_plain_keys_are_dotted_and_others_bracketed() -> None:
    """Identifier-like keys read `$.a.b[0]`; a key with a dot, space or quote is bracketed."""
    assert json_path(("spec", "shards", 0, "path")) == "$.spec.shards[0].path"
    assert json_path(("labels", "example.com/gpu")) == '$.labels["example.com/gpu"]'
    assert json_path(("a", 'q"b\\c')) == '$.a["q\\"b\\\\c"]'
    assert json_path(("a", "b c")) == '$.a["b c"]'


@pytest.mark.parametrize("key, shown", [
    ("pool\n", '$.l["pool\\n"]'), ("x\x1b[2J", '$.l["x\\x1b[2J"]'),
    ("x\x9b2J", '$.l["x\\x9b2J"]'), ("a\x85b", '$.l["a\\x85b"]'), ("d\x7f", '$.l["d\\x7f"]'),
])
def test_a_control_character_in_a_key_is_escaped(key, shown) -> None:
    """Rule: text the reconciler prints never carries a raw C0/C1 control from a manifest: a
    YAML key holding one (a newline, ESC, CSI, NEL, DEL) is shown escaped in the path."""
    assert json_path(("l", key)) == shown
