"""The router's pure world (§9, §12): the Model, the node, and the table a plan gives.

tests/router/test_rules.py and tests/replicas/test_identity.py both ask
``rules.routes`` what a plan makes of some roles: one GGUF Model ``qwen`` (one
small shard under ``/m``) and a node that allows ports 8000–8999.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.core.decisions import Plan
from reconciler.core.desired import Desired, NodeConfig, PortRange, RoleSpec
from reconciler.router import rules
from reconciler.router.rules import Table
from tests.support.worlds import gguf

MODEL = gguf(root="/m", size=10)
NODE = NodeConfig(allowed_ports=PortRange(start=8000, end=8999))


def routes(plan: Plan, roles: Iterable[RoleSpec], outcomes: Iterable = (), *,
           node: NodeConfig = NODE) -> Table:
    """``rules.routes`` of ``plan`` for ``roles`` on ``node``, the Model ``qwen`` known."""
    return rules.routes(plan, Desired(roles=tuple(roles), models=(MODEL,), node=node), outcomes)
