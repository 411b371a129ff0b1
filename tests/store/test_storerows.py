"""A role's record as a row of state.db's ``roles`` table and back (state/storerows.py, §3)."""

from __future__ import annotations

import json

import pytest

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import ExitInfo, Intent, Liveness, RoleRecord, Terminal
from reconciler.state import storerows

FULL = RoleRecord(
    name="chat", instance_id="chat-0000abcd", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
    port=8090, pid=4242, create_time=12.5, launch_digest="d" * 64,
    launch_argv=("--port", "8090", "--ctx-size", "4096"), restarts=2, started_at=10.0,
    exited_at=20.0, terminal=Terminal.GAVE_UP, terminal_detail="crashed 3 times",
    we_loaded=True, reserved=3 * 10**9,
    exit=ExitInfo(known=True, code=1, log=("first line", "last line")),
    liveness=Liveness(failures=2, since=15.0, detail="no answer"), generation="g1",
    intent=Intent(verb="restart", reason="spec_changed", instance_id="chat-0000abcd", stops=4242),
    devices=(("cuda:0", 2 * 10**9), ("cuda:1", 10**9)))


@pytest.mark.parametrize("record", [FULL, RoleRecord(name="bare", instance_id="bare-1",
                                                        runtime=Runtime.OLLAMA, mode=Mode.ADOPTED)],
                         ids=["full", "bare"])
def test_a_record_is_read_back_as_written(record: RoleRecord) -> None:
    """§3 what the store writes of a record is what it reads back, every field (enums, tuples,
    nested records, devices) the same value."""
    row = storerows.row_of(record)
    assert "updated_at" not in row  # the store's own clock, not the record's
    assert storerows.record_of(json.loads(json.dumps(row))) == record


def test_a_newer_reconcilers_fields_are_left_out_not_fatal() -> None:
    """§3 a nested record written by a newer reconciler (fields this one does not know) reads
    back with the fields it knows; nothing raises."""
    row = storerows.row_of(FULL)
    row["exit"] = json.dumps({**json.loads(row["exit"]), "cgroup": "/srv/x"})
    row["liveness"] = json.dumps({**json.loads(row["liveness"]), "tokens": 7})
    back = storerows.record_of(row)
    assert back.exit == FULL.exit and back.liveness == FULL.liveness
