"""NodeConfig.status_page as the loader reads it: loopback only, a port of its own (§1.3, §11)."""

from __future__ import annotations

import pytest

from reconciler.core.desired import StatusPageConfig
from tests.manifests.test_router_config import _load


def test_status_page_is_parsed() -> None:
    """§11 NodeConfig ``status_page``: ``listen`` (``localhost`` as 127.0.0.1, ``[::1]`` kept) and
    ``api_key_file`` are parsed."""
    result = _load(', router: {listen: "127.0.0.1:9100"}, '
                   'status_page: {listen: "localhost:9101", api_key_file: /etc/r/key}')
    assert not result.problems, result.problems
    assert result.desired.node.status_page == StatusPageConfig(
        host="127.0.0.1", port=9101, api_key_file="/etc/r/key")
    assert _load(', router: {listen: "127.0.0.1:9100"}, status_page: {listen: "[::1]:9101"}'
                 ).desired.node.status_page.listen == "[::1]:9101"


@pytest.mark.parametrize("listen", ["0.0.0.0:9101", "192.168.1.5:9101", "[::]:9101",
                                    "example.com:9101", ":9101"])
def test_a_status_page_beyond_loopback_is_refused(listen: str) -> None:
    """§5/§11 a status page ``listen`` beyond loopback (wildcards, other addresses, names, no host)
    is refused at its path."""
    result = _load(f', router: {{listen: "127.0.0.1:9100"}}, status_page: {{listen: "{listen}"}}')
    assert result.desired is None
    assert any("$.spec.status_page.listen" in str(p) and "loopback" in str(p)
               for p in result.problems), result.problems


def test_the_loader_refuses_a_non_loopback_host_the_schema_let_through() -> None:
    """127.x passes the schema; the loader's own check is what keeps 0.0.0.0-like hosts out."""
    from reconciler.manifests import nodedoc

    problems = []

    class Reader:
        def add(self, path, message):
            problems.append((path, message))

    host, port = nodedoc._loopback(Reader(), "status_page", "10.0.0.1:80")
    assert (host, port) == ("10.0.0.1", 80)
    assert problems and "not a loopback address" in problems[0][1]


@pytest.mark.parametrize("port,who", [(8090, "role 'coder'"), (9100, "the router's")])
def test_the_status_page_needs_a_port_of_its_own(port: int, who: str) -> None:
    """§11 the status page's port may be neither a role's nor the router's: refused, naming who has
    it."""
    result = _load(f', router: {{listen: "127.0.0.1:9100"}}, '
                   f'status_page: {{listen: "127.0.0.1:{port}"}}')
    assert result.desired is None
    assert any("$.spec.status_page.listen" in str(p) and who in str(p)
               for p in result.problems), result.problems
