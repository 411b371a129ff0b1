"""A claim placed on devices runs the generation of the launch placement built (§4, §7.1)."""

from __future__ import annotations

from reconciler.core.decisions import Start, Verb
from reconciler.core.desired import Desired, MemorySpec, NodeConfig, PortRange
from reconciler.core.devices import DeviceRequest
from reconciler.core.observed import Observed, Remembered
from reconciler.planner import identity
from reconciler.planner.plan import plan
from tests.support.worlds import CTX, GB, LLAMA_PROGRAM, QWEN, gpus, role


def test_a_placed_claim_with_restarted_at_runs_its_launchs_generation() -> None:
    """§4 a generation is the launch *and* ``restarted_at``: a ``count`` role placed on the
    devices placement picked starts the generation of that launch with its restarted_at (the
    digest alone would be a generation never its own: the next pass would restart it)."""
    node = NodeConfig(allowed_ports=PortRange(start=8000, end=9000), serve_programs=LLAMA_PROGRAM,
                      devices=gpus(24 * GB, 24 * GB))
    spec = role("chat", 8090, memory=MemorySpec(weights=10 * GB),
                devices=DeviceRequest(count=1), restarted_at="2026-11-30T10:00:00Z")
    for _ in range(2):  # the first pass builds the placed launch; the second finds it kept
        d = plan(Desired(roles=(spec,), models=(QWEN,), node=node), Observed(), Remembered(),
                 CTX, 100.0).decisions[0]
        assert d.verb is Verb.START and isinstance(d.act, Start) and d.act.launch is not None
        assert d.devices and d.act.generation == identity.generation(
            d.act.launch.digest, spec.restarted_at) != d.act.launch.digest
