"""A stop that ended its server is recorded at once (recording.stopped; BEHAVIOUR §7).

An eviction stops one on-demand role to start another in the same pass; the
start's record is written right after its spawn, so the stopped role's must
be written right after its stop, or the store shows both reservations at once.
"""

from __future__ import annotations

from reconciler.engine import recording
from reconciler.core.decisions import Decision, Reason, Verb, flat
from reconciler.core.desired import Desired, Mode, NodeConfig, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import RoleRecord
from reconciler.core.observed import flat_record
from reconciler.state.store import Store

SPEC = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                serve=ServeSpec(port=8091))
HELD = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                  mode=Mode.MANAGED, port=8091, pid=4242, create_time=1.0, reserved=600_000)


def _stop(reason: Reason) -> Decision:
    return flat(role="chat", verb=Verb.STOP, reason=reason, pid=4242, create_time=1.0,
                    instance_id="chat-1", release=600_000)


def test_an_evicted_role_releases_its_memory_in_the_store_at_once(tmp_path):
    """After recording.stopped the record holds no pid and no memory."""
    desired = Desired(roles=(SPEC,), node=NodeConfig())
    with Store(tmp_path) as store:
        store.put_role(HELD)
        recording.stopped(store, desired, _stop(Reason.EVICTED), now=10.0)
        after = store.role("chat")
    assert after is not None and after.reserved == 0 and after.pid is None


def test_a_removed_role_is_emptied_not_dropped(tmp_path):
    """A removed role's record stays (the pass's end drops it) but holds nothing."""
    with Store(tmp_path) as store:
        store.put_role(HELD)
        recording.stopped(store, Desired(node=NodeConfig()), _stop(Reason.REMOVED), now=10.0)
        after = store.role("chat")
    assert after is not None and after.reserved == 0 and after.pid is None
