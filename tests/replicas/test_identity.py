"""§12 instances as the router's routes and the `status` table see them."""

from __future__ import annotations

from reconciler.commands import status
from reconciler.core.decisions import Plan, Reason, Status, Verb, flat
from reconciler.core.desired import Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.instances import instances
from reconciler.router import rules
from reconciler.router.rules import RouteState
from tests.support.routing import routes
CHAT = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                serve=ServeSpec(port=8091), replicas=3)


def test_routes_carry_group_and_replica_and_answer_to_the_group_name() -> None:
    """§12 contract: each instance's route has ``group`` and ``replica`` (filled by routes()),
    and its names include the group's name and the Model's, as a single role's do."""
    specs = instances(CHAT)
    plan = Plan(decisions=tuple(flat(role=s.name, verb=Verb.KEEP, reason=Reason.IN_SYNC,
                                     status=Status.RUNNING) for s in specs))
    table = routes(plan, specs)
    got = [(r.role, r.group, r.replica, r.port) for r in table.routes]
    assert got == [("chat", "chat", 0, 8091), ("chat/1", "chat", 1, 8092),
                   ("chat/2", "chat", 2, 8093)]
    assert all({"chat", "qwen"} <= set(r.names) for r in table.routes)
    assert rules.Route(role="x", names=("x",), host="h", port=1,
                       state=RouteState.READY).group == "x"


def test_an_instance_waiting_for_its_rolling_turn_is_served() -> None:
    """§12 an instance whose restart waits (rolling_update) still runs the previous
    generation: its route is READY, so the others take the restarted one's requests."""
    specs = instances(CHAT)[:2]
    plan = Plan(decisions=(
        flat(role="chat", verb=Verb.RESTART, reason=Reason.SPEC_CHANGED, status=Status.RUNNING),
        flat(role="chat/1", verb=Verb.WAIT, reason=Reason.ROLLING_UPDATE,
             status=Status.RUNNING)))
    table = routes(plan, specs)
    assert [r.state for r in table.routes] == [RouteState.WAIT, RouteState.READY]


def _row(role: str, state: str) -> dict:
    return {"role": role, "runtime": "llamacpp", "mode": "managed", "status": state,
            "pid": 1, "port": 1, "restarts": 0, "reserved_bytes": 0, "detail": ""}


def test_status_groups_instances_under_their_role() -> None:
    """§12 `status`: a role of several instances is one line (count, statuses), its
    instances indented below it in index order; a table without instances is unchanged."""
    rows = [_row("chat/1", "starting"), _row("zeta", "running"), _row("chat", "running"),
            _row("chat/2", "running")]
    got = [(r["role"], r["status"]) for r in status._grouped(rows)]
    assert got == [("chat", "3 instances"), ("  chat", "running"), ("  chat/1", "starting"),
                   ("  chat/2", "running"), ("zeta", "running")]
    assert status._grouped(rows)[0]["detail"] == "2 running, 1 starting"
    plain = [_row("b", "running"), _row("a", "running")]
    assert status._grouped(plain) == plain
