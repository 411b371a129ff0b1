"""A role's record as a row of state.db's ``roles`` table and back (state/storerows.py, §3)."""

from __future__ import annotations

import json

import attrs
import pytest

from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import ExitInfo, Intent, Liveness, RoleRecord, Terminal
from reconciler.core.observed import LoadedModel, ServerProcess, flat_record
from reconciler.state import storerows

FULL = flat_record(
    name="chat", instance_id="chat-0000abcd", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
    port=8090, pid=4242, create_time=12.5, launch_digest="d" * 64,
    launch_argv=("--port", "8090", "--ctx-size", "4096"), restarts=2, started_at=10.0,
    exited_at=20.0, terminal=Terminal.GAVE_UP, terminal_detail="crashed 3 times",
    reserved=3 * 10**9,
    exit=ExitInfo(known=True, code=1, log=("first line", "last line")),
    liveness=Liveness(failures=2, since=15.0, detail="no answer"), generation="g1",
    intent=Intent(verb="restart", reason="spec_changed", instance_id="chat-0000abcd", stops=4242),
    devices=(("cuda:0", 2 * 10**9), ("cuda:1", 10**9)))


LOADED = flat_record(
    name="llama", instance_id="llama-0000abcd", runtime=Runtime.OLLAMA, mode=Mode.MANAGED,
    port=11434, model_tag="llama3:8b", we_loaded=True, reserved=5 * 10**9, started_at=10.0,
    generation="g2")


@pytest.mark.parametrize("record", [FULL, LOADED, attrs.evolve(LOADED, load=LoadedModel(
    tag="llama3:8b", ours=False)), flat_record(name="bare", instance_id="bare-1",
                                               runtime=Runtime.OLLAMA, mode=Mode.ADOPTED)],
                         ids=["full", "loaded", "unloaded", "bare"])
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


def test_a_row_no_reconciler_writes_reads_as_the_part_absent() -> None:
    """§3 records by kind: a row holding a create time without a pid, or a load of ours
    without its tag (no reconciler writes either), reads back without that part, never
    fatally: a create time names nothing without its pid, and a load without its tag is
    not ours to unload (``ownership.our_load``)."""
    row = storerows.row_of(FULL)
    row.update(pid=None, create_time=12.5, model_tag=None, we_loaded=1)
    back = storerows.record_of(row)
    assert back.process is None and back.create_time is None
    assert back.load is None and not back.we_loaded
    row.update(pid=4242, model_tag="llama3:8b", we_loaded=0)
    back = storerows.record_of(row)
    assert back.process == ServerProcess(pid=4242, create_time=12.5)
    assert back.load == LoadedModel(tag="llama3:8b", ours=False)


def test_the_columns_are_round_3s() -> None:
    """§3 the store still opens a round-3 state file: a record's parts are written as the
    flat columns they always were (pid, create_time, model_tag, we_loaded), none added."""
    assert {"pid", "create_time", "model_tag", "we_loaded"} <= set(storerows.row_of(FULL))
    assert not {"process", "load"} & set(storerows.row_of(LOADED))
    assert storerows.row_of(LOADED)["we_loaded"] == 1 and storerows.row_of(FULL)["pid"] == 4242
