"""§1.2 sizes and durations as manifests write them: what the parsers refuse."""

from __future__ import annotations

import math

import pytest

from reconciler.core import units


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "-5s", -1])
def test_a_duration_is_finite_and_not_negative(value) -> None:
    """§1.2 YAML's `.inf` and `.nan` are numbers, not durations: a backoff cap or idle_after
    that never ends is refused, as is a negative one."""
    with pytest.raises(ValueError):
        units.parse_duration(value)


def test_a_duration_in_its_forms() -> None:
    """§1.2 seconds as a number or text, and unit strings added up (the refusals' twin)."""
    assert units.parse_duration(2) == 2.0
    assert units.parse_duration("1h30m") == 5400.0
    assert units.parse_duration("250ms") == 0.25
    assert units.parse_duration("-2s", allow_negative=True) == -2.0
