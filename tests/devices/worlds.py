"""Hypothesis strategies for worlds with devices (§7.1, test helper).

A node of 1–4 CUDA devices of 8–24 GB; up to 6 llama.cpp roles, each asking
for a count of devices or for fixed ids, some always on and some on demand.
The world starts from nothing and is driven by ``plan`` + ``simulate`` (the
real planner and the real record rules), so every state it reaches is one the
reconciler could be in.
"""

from __future__ import annotations

from hypothesis import strategies as st

from reconciler.core.decisions import PlanContext
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    NodeConfig,
    Runtime,
    WantedState,
)
from reconciler.core.devices import Device, DeviceKind, DeviceRequest
from tests.support.worlds import DATA_ROOT, GB, QWEN, role

CTX = PlanContext(environ=(("PATH", "/usr/bin"),), data_root=DATA_ROOT)  # PATH only: as it was
MODEL = QWEN
NAMES = ("a", "b", "c", "d", "e", "f")


@st.composite
def nodes(draw) -> NodeConfig:
    n = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.sampled_from([8, 12, 16, 24]), min_size=n, max_size=n))
    return NodeConfig(
        name="gpu", serve_programs=((Runtime.LLAMACPP, "/opt/llama-server"),),
        devices=tuple(Device(id=f"cuda:{i}", kind=DeviceKind.CUDA, memory=s * GB)
                      for i, s in enumerate(sizes)))


@st.composite
def requests(draw, node: NodeConfig) -> DeviceRequest:
    ids = [d.id for d in node.devices]
    if draw(st.booleans()):
        count = draw(st.integers(1, len(ids)))
        split = tuple(draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))) \
            if count > 1 and draw(st.booleans()) else ()
        return DeviceRequest(count=count, split=tuple(float(w) for w in split))
    chosen = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=len(ids), unique=True))
    return DeviceRequest(ids=tuple(sorted(chosen)))


@st.composite
def desireds(draw, on_demand: bool = True, only_on_demand: bool = False) -> Desired:
    node = draw(nodes())
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    roles = []
    for i, name in enumerate(sorted(names)):
        states = [WantedState.RUNNING, WantedState.STOPPED] + (
            [WantedState.ON_DEMAND] if on_demand else [])
        if only_on_demand:
            states = [WantedState.ON_DEMAND]
        roles.append(role(
            name, 8080 + i, state=draw(st.sampled_from(states)),
            memory=MemorySpec(weights=draw(st.integers(1, 20)) * GB,
                              kv=draw(st.sampled_from([0, GB // 2]))),
            devices=draw(requests(node))))
    return Desired(roles=tuple(roles), models=(MODEL,), node=node)
