"""How a server ended is remembered until the next start (records, store, the planner's words)."""

from __future__ import annotations

import sqlite3

import attrs

from reconciler.state import store as store_module
from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.core.desired import Launch, Mode, RestartPolicy, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import ExitInfo, Liveness, ProcessFacts, RoleObservation, RoleRecord
from reconciler.core.observed import flat_record
from reconciler.planner.records import ActionFacts, after_decision
from reconciler.state.store import Store
from tests.plan import golden

SPEC = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                serve=ServeSpec(port=8090))
RUNNING = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                     mode=Mode.MANAGED, port=8090, pid=10, create_time=1.0,
                     launch_digest="old", restarts=1, started_at=5.0, reserved=100)
ENDED = ExitInfo(known=True, code=1, log=("0.00.001.000 E bad kv cache",))
GONE = RoleObservation(name="chat", process=ProcessFacts(pid=10, create_time=1.0, alive=False,
                                                         owned=False), exit=ENDED)
LAUNCH = Launch(argv=("/srv",), env=(), cwd="/d/chat-1", run_as=None, digest="new")


def _wait() -> Decision:
    return flat(role="chat", verb=Verb.WAIT, reason=Reason.BACKOFF, status=Status.BACKOFF,
                    instance_id="chat-1", restarts=1)


def test_the_first_look_at_a_dead_server_stores_how_it_ended():
    """The exit observed when the server is first found gone goes into the record."""
    after = after_decision(RUNNING, SPEC, _wait(), GONE, None, 60.0)
    assert after.exit == ENDED and after.exited_at == 60.0


def test_a_later_look_keeps_the_first_exit():
    """Once stored, the exit is not replaced by a later (poorer) observation."""
    stored = attrs.evolve(RUNNING, exited_at=60.0, exit=ENDED)
    later = attrs.evolve(GONE, exit=ExitInfo(log=("other",)))
    assert after_decision(stored, SPEC, _wait(), later, None, 70.0).exit == ENDED


def test_a_start_clears_the_exit_and_the_liveness_counters():
    """A new server starts with no exit and fresh liveness counters; so does a clean stop."""
    stored = attrs.evolve(RUNNING, exited_at=60.0, exit=ENDED,
                          liveness=Liveness(failures=2, since=50.0, checked_at=55.0))
    restart = flat(role="chat", verb=Verb.RESTART, reason=Reason.CRASHED, instance_id="chat-1",
                       launch=LAUNCH, restarts=2, reserve=100)
    after = after_decision(stored, SPEC, restart, GONE, ActionFacts(ok=True, exited=True, pid=11,
                                                                  create_time=61.0), 61.0)
    assert after.exit is None and after.liveness == Liveness() and after.pid == 11
    stop = flat(role="chat", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.STATE_STOPPED, instance_id="chat-1")
    stopped = after_decision(stored, SPEC, stop, GONE, ActionFacts(ok=True, exited=True), 62.0)
    assert stopped.exit is None


def test_a_failed_spawn_drops_the_stale_exit():
    """A launch that never ran has no exit of its own: the old one would mislead."""
    stored = attrs.evolve(RUNNING, process=None, exited_at=60.0, exit=ENDED)
    restart = flat(role="chat", verb=Verb.RESTART, reason=Reason.CRASHED, instance_id="chat-1",
                       launch=LAUNCH, restarts=2, reserve=100)
    after = after_decision(stored, SPEC, restart, GONE, ActionFacts(ok=False), 61.0)
    assert after.exit is None and after.exited_at == 61.0


def test_give_up_keeps_the_exit_for_status():
    """A role that gave up still says how its last server ended."""
    give_up = flat(role="chat", verb=Verb.GIVE_UP, reason=Reason.MAX_RESTARTS,
                       status=Status.GAVE_UP, detail="exited …", instance_id="chat-1")
    after = after_decision(RUNNING, SPEC, give_up, GONE, None, 60.0)
    assert after.exit == ENDED and after.terminal is not None


def test_the_store_keeps_exit_and_liveness_across_processes(tmp_path):
    """Both values survive a write and a read by another connection, field for field."""
    record = attrs.evolve(RUNNING, exit=attrs.evolve(ENDED, oom="Out of memory: Killed process 10"),
                          liveness=Liveness(failures=2, since=1.5, checked_at=2.5, detail="x",
                                            decoded=10.0, decoded_at=2.0))
    with Store(tmp_path) as store:
        store.put_role(record)
    with Store(tmp_path) as store:
        assert store.role("chat") == record


def test_a_v3_database_gains_the_columns_and_keeps_its_roles(tmp_path):
    """Migrating 3 → 4 keeps every role; its exit is None and its counters fresh."""
    with Store(tmp_path) as store:
        store.put_role(RUNNING)
    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript("ALTER TABLE roles DROP COLUMN exit; ALTER TABLE roles DROP COLUMN liveness;"
                     "PRAGMA user_version = 3;")
    db.close()
    with Store(tmp_path) as store:
        assert store.role("chat") == RUNNING
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION
    db.close()


def test_a_replayed_column_step_succeeds(tmp_path):
    """A 4 → 5 step that finds its columns already there (a racing run) still succeeds."""
    with Store(tmp_path) as store:
        store.put_role(attrs.evolve(RUNNING, exit=ENDED))
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        assert store.role("chat").exit == ENDED


def _crash_case(exit_info: ExitInfo | None, now: float):
    case = {"roles": {"chat": {"port": 8090}},
            "remembered": {"chat": {"pid": 100, "restarts": 1, "exited_at": 1000.0,
                                    "reserved": 1000}},
            "observed": {"roles": {"chat": {"pid": 100, "alive": False, "owned": False}}},
            "now": now}
    (step,) = golden.steps(case, "exit")
    remembered = step.remembered
    if exit_info is not None:
        remembered = attrs.evolve(remembered, roles=tuple(
            attrs.evolve(r, exit=exit_info) for r in remembered.roles))
    return step, remembered


def test_the_plan_says_why_in_the_backoff_and_the_restart():
    """A known exit puts its code and telling line in the wait and the restart; none: as before."""
    from reconciler.planner.plan import plan

    for now, verb in ((1001.0, Verb.WAIT), (1010.0, Verb.RESTART)):
        step, remembered = _crash_case(ENDED, now)
        d = plan(step.desired, step.observed, remembered, step.ctx, step.now).decision("chat")
        assert d.verb is verb
        assert d.detail.startswith("exited (code 1): bad kv cache; restart 2 of 5")
        assert d.why.startswith("exited (code 1): bad kv cache; ")
        step, remembered = _crash_case(None, now)
        d = plan(step.desired, step.observed, remembered, step.ctx, step.now).decision("chat")
        assert d.detail.startswith("exited; restart 2 of 5")
        assert d.why in ("retry in 3s", "restart 2 of 5")


def test_the_give_up_says_why_too():
    """At max_restarts the gave-up detail carries the exit's headline and line."""
    from reconciler.planner.plan import plan

    step, remembered = _crash_case(ENDED, 1010.0)
    remembered = attrs.evolve(remembered, roles=tuple(
        attrs.evolve(r, restarts=5) for r in remembered.roles))
    d = plan(step.desired, step.observed, remembered, step.ctx, step.now).decision("chat")
    assert d.verb is Verb.GIVE_UP
    assert d.detail == ("exited (code 1) after 5 restarts (max_restarts 5): bad kv cache; "
                        "run `reconcile start chat`")
    assert RestartPolicy().max_restarts == 5
