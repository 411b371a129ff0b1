"""What a node would run, from the manifests alone (PURE; BEHAVIOUR §10).

``reconcile plan --offline`` and ``reconcile fleet`` plan without probing,
without the process table and without the state store: for review, in CI,
on any machine. The node is taken to be empty and able: nothing of ours is
running, no port is taken, every model verifies, every Ollama answers with
every wanted tag pulled and none resident. So the plan says what the node
would start or load from scratch, and what its ledger (§7) would refuse;
adopted roles are kept (only observed, never started), and roles in
``state: stopped`` are absent.

The launch is computed with an empty environment (nothing passed through:
the reviewer's shell must not change the plan) and the node's ``data_root``
(default ``/var/lib/reconciler/instances``, where a root reconciler keeps it).
"""

from __future__ import annotations

from reconciler.planner import plan as planner
from reconciler.core.decisions import Plan, PlanContext
from reconciler.core.desired import Desired
from reconciler.manifests.fleet import fetched_models
from reconciler.core.observed import FetchObservation, FetchState, Health, Observed, ProbeFacts, Remembered, RoleObservation
from reconciler.runtimes import spec_of

#: Where a root reconciler keeps instance directories (``<state dir>/instances``).
DEFAULT_DATA_ROOT = "/var/lib/reconciler/instances"


def observed(desired: Desired) -> Observed:
    """The observation of an empty, able node: only model-loading endpoints answer."""
    roles = []
    for role in desired.roles:
        if not spec_of(role.runtime).loads_models:
            continue  # nothing running, no port taken, no probe answer
        model = desired.model(role.model)
        tag = model.ollama_tag if model is not None else None
        roles.append(RoleObservation(name=role.name, probe=ProbeFacts(
            health=Health.UP, detail="offline: assumed up",
            listed_models=(tag,) if tag else ())))
    fetch = desired.node.fetch
    fetches = tuple(FetchObservation(  # §1.6 an empty node has none of its Models yet
        model=m.name, generation=m.fetch_generation(fetch.hf_endpoint), state=FetchState.NEEDED,
        total=sum(f.size or 0 for f in m.files), missing=sum(f.size or 0 for f in m.files))
        for m in fetched_models(desired)) if fetch is not None else ()
    return Observed(roles=tuple(roles), fetches=fetches)


def plan(desired: Desired, *, data_root: str | None = None) -> Plan:
    """The plan of ``desired``'s node from scratch, without IO."""
    root = data_root or desired.node.data_root or DEFAULT_DATA_ROOT
    ctx = PlanContext(allow_empty=False, environ=(), data_root=root)
    return planner.plan(desired, observed(desired), Remembered(), ctx, 0.0)
