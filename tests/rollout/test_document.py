"""§13 the Rollout document: its start is an instant, the same on every node."""

from __future__ import annotations

import pytest

from reconciler.manifests.rolloutdoc import parse_time


def test_a_start_with_its_offset_is_one_instant() -> None:
    """Z, +01:00 and a fraction of a second read as the instant they name."""
    assert parse_time("2026-12-02T14:00:00Z") == 1796220000.0
    assert parse_time("2026-12-02T15:00:00+01:00") == 1796220000.0
    assert parse_time("2026-12-02t14:00:00.5z") == 1796220000.5
    assert parse_time("2026-12-02T14:00:00.123456789Z") == pytest.approx(1796220000.123457)


@pytest.mark.parametrize("text", ["2026-12-02T14:00:00", "2026-12-02 14:00", "2026-12-02",
                                  "20261202T140000Z", "2026-12-02T14:00Z", "tomorrow"])
def test_a_time_without_an_offset_or_not_rfc3339_is_refused(text: str) -> None:
    """A time without its offset would be another instant on every node's clock: refused,
    as is anything RFC 3339 does not write."""
    with pytest.raises(ValueError, match="is not an RFC 3339 time with its offset"):
        parse_time(text)


def test_a_day_out_of_range_is_refused() -> None:
    """February 30th has the shape of a time but is none."""
    with pytest.raises(ValueError, match="is not a valid time"):
        parse_time("2026-02-30T14:00:00Z")
