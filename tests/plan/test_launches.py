"""The planner's memo of launches (planner/launches.py) never answers with a stale launch.

A memo is only as right as its key. Each test plans one world, then another
that differs in one value a launch is built from, in the same process (the
memo warm), and compares the second plan with the plan a fresh memo gives:
the two must be equal, launch for launch. The properties do the same over
generated worlds, with and without devices.
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.desired import (
    Desired,
    Mode,
    NodeConfig,
    RoleSpec,
    RunAs,
    Runtime,
    ServeSpec,
)
from reconciler.core.devices import Device, DeviceKind, DeviceRequest
from reconciler.core.observed import Observed, Remembered, RoleRecord
from reconciler.planner import launches
from reconciler.planner.plan import forget, plan
from tests.devices import worlds as device_worlds
from tests.plan.worlds import CTX, NOW, SERVE_PROGRAMS, World, worlds
from tests.support.worlds import GB, QWEN, gguf

PROJ = gguf("proj", path="p.gguf", sha256="1" * 64)
NODE = NodeConfig(serve_programs=SERVE_PROGRAMS)
ROLE = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                serve=ServeSpec(port=8080, mmproj="proj"))


def _world(desired: Desired, remembered: Remembered = Remembered(), ctx=CTX) -> World:
    return World(desired=desired, observed=Observed(), remembered=remembered, ctx=ctx)


def _plan(w: World):
    return plan(w.desired, w.observed, w.remembered, w.ctx, w.now)


def _fresh(w: World):
    forget()
    return _plan(w)


def _launches(p) -> dict:
    return {d.role: (d.launch, d.generation, d.devices) for d in p.decisions}


def assert_no_stale_launch(first: World, second: World) -> None:
    _fresh(first)
    warm = _plan(second)  # the memo holds what ``first`` built
    assert warm == _fresh(second)


def _one(**node) -> Desired:
    return Desired(roles=(ROLE,), models=(PROJ, QWEN), node=attrs.evolve(NODE, **node))


def test_the_launches_a_start_carries_come_from_the_memo_unchanged() -> None:
    """Sanity: a warm plan of the same world is the same plan, launch included."""
    w = _world(_one())
    cold = _fresh(w)
    assert cold.decisions[0].launch is not None
    assert _plan(w) == cold


def test_a_changed_model_root_changes_the_argv() -> None:
    """§6 the launch memo is keyed by the Model's root: a moved Model plans its new path, never a
    stale launch."""
    moved = attrs.evolve(QWEN, root="/elsewhere/qwen")
    second = _world(Desired(roles=(ROLE,), models=(PROJ, moved), node=NODE))
    assert_no_stale_launch(_world(_one()), second)
    assert "/elsewhere/qwen/q.gguf" in _plan(second).decisions[0].launch.argv


def test_a_changed_model_another_flag_loads_changes_the_argv() -> None:
    """The mmproj Model is a Model of the launch too (not only ``spec.model``)."""
    moved = attrs.evolve(PROJ, root="/elsewhere/proj")
    second = _world(Desired(roles=(ROLE,), models=(moved, QWEN), node=NODE))
    assert_no_stale_launch(_world(_one()), second)
    assert "/elsewhere/proj/p.gguf" in _plan(second).decisions[0].launch.argv


def test_node_launch_settings_are_part_of_the_key() -> None:
    """§6 run_as, serve programs, env and env passthrough of the NodeConfig are part of the launch
    memo's key."""
    base = _world(_one())
    for changed in (_one(run_as=RunAs(uid=1000, gid=1000)),
                    _one(serve_programs=((Runtime.LLAMACPP, "/usr/local/bin/llama-server"),)),
                    _one(env=(("OMP_NUM_THREADS", "4"),)),
                    _one(env_passthrough=("HOME",))):
        assert_no_stale_launch(base, _world(changed))
        assert _launches(_plan(_world(changed))) != _launches(_plan(base))


def test_a_passed_through_value_changes_the_launch_env_not_the_digest() -> None:
    """§6 the digest names passed-through variables but ignores their values; the env has them."""
    first = _world(_one(), ctx=attrs.evolve(CTX, environ=(("HOME", "/home/a"),)))
    second = _world(_one(), ctx=attrs.evolve(CTX, environ=(("HOME", "/home/b"),)))
    assert_no_stale_launch(first, second)
    a, b = _plan(first).decisions[0].launch, _plan(second).decisions[0].launch
    assert a.digest == b.digest
    assert ("HOME", "/home/b") in b.env and ("HOME", "/home/a") not in b.env


def test_the_data_root_is_part_of_the_key() -> None:
    """§6 the data root is part of the launch memo's key: a new root gives new working directories."""
    second = _world(_one(), ctx=attrs.evolve(CTX, data_root="/var/lib/other"))
    assert_no_stale_launch(_world(_one()), second)
    assert _plan(second).decisions[0].launch.cwd.startswith("/var/lib/other/")


def test_a_count_role_keeps_the_devices_its_record_names() -> None:
    """A count request's launch before placement is built from the record's devices."""
    devices = tuple(Device(id=f"cuda:{i}", kind=DeviceKind.CUDA, memory=80 * GB)
                    for i in range(2))
    role = attrs.evolve(ROLE, devices=DeviceRequest(count=1))
    desired = Desired(roles=(role,), models=(PROJ, QWEN),
                      node=attrs.evolve(NODE, devices=devices))
    on = {i: Remembered(roles=(RoleRecord(name="chat", instance_id="chat-x",
                                          runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, port=8080,
                                          exited_at=NOW - 1000,
                                          devices=((f"cuda:{i}", GB),)),))
          for i in (0, 1)}
    assert_no_stale_launch(_world(desired, on[0]), _world(desired, on[1]))
    p = _plan(_world(desired, on[1]))
    # Both devices are empty: a fresh best fit would take cuda:0 (the first of a tie).
    assert p.decisions[0].devices == (("cuda:1", 0),), p.decisions[0]
    assert ("CUDA_VISIBLE_DEVICES", "1") in p.decisions[0].launch.env


def test_the_table_is_bounded(monkeypatch) -> None:
    """Past LIMIT entries a table starts again: slower, never wrong."""
    monkeypatch.setattr(launches, "LIMIT", 2)
    roles = [attrs.evolve(ROLE, name=f"r{i}", serve=attrs.evolve(ROLE.serve, port=8080 + i))
             for i in range(5)]
    w = _world(Desired(roles=tuple(roles), models=(PROJ, QWEN), node=NODE))
    cold = _fresh(w)
    assert _plan(w) == cold
    bound = launches.for_node(NODE, dict(CTX.environ), CTX.data_root).bind(
        (PROJ, QWEN), {"proj": PROJ, "qwen": QWEN})
    assert 1 <= len(bound._tables.prepared) <= 2


@settings(max_examples=60)
@given(worlds(), worlds())
def test_any_world_after_any_other_plans_as_with_a_fresh_memo(first, second) -> None:
    """Property §6: planning any world after any other gives the launches a fresh memo would."""
    assert_no_stale_launch(first, second)


@settings(max_examples=40)
@given(device_worlds.desireds(on_demand=False), st.data())
def test_device_worlds_plan_as_with_a_fresh_memo(desired, data) -> None:
    """Placement moves claims between passes: a placed launch is never another's."""
    first = _world(desired)
    p = _fresh(first)
    # The next pass remembers where each start went; then the world changes under it.
    remembered = Remembered(roles=tuple(
        RoleRecord(name=d.role, instance_id=d.instance_id, runtime=d.runtime,
                   mode=Mode.MANAGED, port=d.port,
                   exited_at=NOW - 1000, devices=d.devices)
        for d in p.decisions if d.devices))
    other = data.draw(device_worlds.desireds(on_demand=False))
    assert_no_stale_launch(first, _world(desired, remembered))
    assert_no_stale_launch(_world(desired, remembered), _world(other, remembered))

