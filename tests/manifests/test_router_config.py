"""NodeConfig.router and state: on-demand as the loader reads them (BEHAVIOUR §1.2, §1.3, §9)."""

from __future__ import annotations

from reconciler.manifests import loader
from reconciler.core.desired import RouterConfig, WantedState

MODEL = """\
apiVersion: reconciler/v1
kind: Model
metadata: {name: m}
spec:
  format: gguf
  root: /srv/models/m
  shards:
    - {path: m.gguf, size: 100, sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}
"""
ROLE = """\
---
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {name: coder}
spec: {runtime: llamacpp, mode: managed, model: m, serve: {port: 8090}, state: on-demand%s}
"""


def _load(node_spec: str, role_extra: str = ""):
    node = ("---\napiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
            f"spec: {{allowed_ports: {{from: 8000, to: 8999}}{node_spec}}}\n")
    return loader.load([("m.yaml", (MODEL + node + ROLE % role_extra).encode())])


def test_router_fields_are_parsed_with_units() -> None:
    """listen, max_queue, queue_timeout, max_body and api_key_file arrive as typed values."""
    result = _load(', router: {listen: "localhost:9100", max_queue: 8, queue_timeout: 90s, '
                   'max_body: 1MiB, api_key_file: /etc/reconciler/key}')
    assert not result.problems
    assert result.desired.node.router == RouterConfig(
        host="127.0.0.1", port=9100, max_queue=8, queue_timeout=90.0, max_body=2**20,
        api_key_file="/etc/reconciler/key")


def test_router_defaults() -> None:
    """Only listen is required: a queue of 64, 5 minutes, 32 MiB bodies, no key; IPv6 loopback."""
    result = _load(', router: {listen: "[::1]:9100"}')
    assert result.desired.node.router == RouterConfig(
        host="::1", port=9100, max_queue=64, queue_timeout=300.0, max_body=32 * 2**20)
    assert result.desired.node.router.listen == "[::1]:9100"


def test_on_demand_role_with_idle_after() -> None:
    """state: on-demand and idle_after (default 10 minutes) reach the RoleSpec."""
    result = _load(', router: {listen: "127.0.0.1:9100"}', ", idle_after: 90s")
    role = result.desired.role("coder")
    assert (role.state, role.on_demand, role.wanted, role.idle_after) == (
        WantedState.ON_DEMAND, True, False, 90.0)
    assert _load(', router: {listen: "127.0.0.1:9100"}').desired.role("coder").idle_after == 600.0


def test_on_demand_without_router_warns() -> None:
    """An on-demand role on a node without a router is valid, with a warning that it never starts."""
    result = _load("")
    assert not result.problems
    assert any("has no router" in w.message and w.path == "$.spec.state"
               for w in result.warnings), result.warnings


def test_on_demand_larger_than_the_budget_warns() -> None:
    """An on-demand role bigger than the whole memory budget can never start: a warning."""
    result = _load(', memory_budget: 50, router: {listen: "127.0.0.1:9100"}')
    assert any("can never start" in w.message for w in result.warnings), result.warnings


def test_router_limits_keys_cors_and_max_concurrency() -> None:
    """§9 the per-client and anti-starvation fields arrive typed; max_concurrency on a role."""
    result = _load(', router: {listen: "127.0.0.1:9100", api_keys_file: /etc/r/keys, '
                   'cors_origins: ["http://localhost:3000"], max_connections: 50, '
                   'idle_timeout: 2s, body_timeout: 3s, drain_timeout: 1m, min_residency: 0s}',
                   ", max_concurrency: 2")
    assert not result.problems, result.problems
    router = result.desired.node.router
    assert (router.api_keys_file, router.cors_origins, router.max_connections,
            router.idle_timeout, router.body_timeout, router.drain_timeout,
            router.min_residency) == ("/etc/r/keys", ("http://localhost:3000",), 50, 2.0, 3.0,
                                      60.0, 0.0)
    assert result.desired.role("coder").max_concurrency == 2


def test_router_limits_are_checked() -> None:
    """A zero timeout, a CORS origin with a path and max_concurrency 0 are problems."""
    zero = _load(', router: {listen: "127.0.0.1:9100", idle_timeout: 0s}')
    assert [p.path for p in zero.problems] == ["$.spec.router.idle_timeout"], zero.problems
    result = _load(', router: {listen: "127.0.0.1:9100", cors_origins: ["http://x/path"]}',
                   ", max_concurrency: 0")
    paths = {p.path for p in result.problems}
    assert paths == {"$.spec.router.cors_origins[0]", "$.spec.max_concurrency"}, paths
