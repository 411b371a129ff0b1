"""§1.3/§2 the port allowlist: one owner, ``NodeConfig.port_allowed`` (with ``PortRange``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.desired import NodeConfig, PortRange

PORTS = st.integers(min_value=1, max_value=65535)


def test_the_range_is_inclusive_at_both_ends() -> None:
    """§1.3 ``allowed_ports {from, to}`` allows both ends and nothing beyond them."""
    node = NodeConfig(allowed_ports=PortRange(start=8000, end=8099))
    assert node.port_allowed(8000) and node.port_allowed(8099) and node.port_allowed(8050)
    assert not node.port_allowed(7999) and not node.port_allowed(8100)


def test_no_allowlist_allows_any_port() -> None:
    """§1.3 without ``allowed_ports`` any port is allowed (and ``validate`` warns)."""
    assert NodeConfig().port_allowed(1) and NodeConfig().port_allowed(65535)


@given(PORTS, PORTS, PORTS)
def test_allowed_exactly_inside_the_range(a: int, b: int, port: int) -> None:
    """§2 a port is allowed exactly when it lies between the range's ends."""
    start, end = min(a, b), max(a, b)
    node = NodeConfig(allowed_ports=PortRange(start=start, end=end))
    assert node.port_allowed(port) is (start <= port <= end)
