"""What a record holds follows what the role is (core/observed.RoleRecord, records.step_of).

A record keeps its server in one ``process`` part (pid and create time), an Ollama load in
one ``load`` part (tag, ours), an intent only while an action is in flight: an impossible
combination cannot be built, and no verb's step gives a role a part of another kind.
"""

from __future__ import annotations

import attrs
import pytest

from reconciler.core.decisions import Decision, Load, Reason, Restart, Start, Status, Unload
from reconciler.core.desired import Mode, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import (
    Intent, LoadedModel, ProcessFacts, RoleObservation, RoleRecord, ServerProcess, flat_record)
from reconciler.planner.records import ActionFacts, after_decision
from tests.plan.payloads import SAMPLES

SERVER = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                     mode=Mode.MANAGED, port=8090, pid=10, create_time=1.0, reserved=100)
LOADED = flat_record(name="llama", instance_id="llama-1", runtime=Runtime.OLLAMA,
                     mode=Mode.MANAGED, port=11434, model_tag="llama3:8b", we_loaded=True,
                     reserved=5)
ALIVE = ProcessFacts(pid=10, create_time=1.0, alive=True, owned=True)


def test_a_create_time_without_its_pid_cannot_be_built() -> None:
    """§3 a server is ours by its pid *and* create time together: a create time alone names
    nothing, so a record holding one is refused; the two are read as one part."""
    with pytest.raises(TypeError, match="without a pid"):
        flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                    mode=Mode.MANAGED, create_time=1.0)
    assert SERVER.process == ServerProcess(pid=10, create_time=1.0)
    assert (SERVER.pid, SERVER.create_time) == (10, 1.0)
    assert attrs.evolve(SERVER, process=None).create_time is None


def test_a_load_of_ours_without_its_tag_cannot_be_built() -> None:
    """§2 ours to unload is a tag our load put there: a load of ours without a tag is refused;
    a tag no longer ours keeps the tag (a changed spec must still know what to unload)."""
    with pytest.raises(TypeError, match="without its tag"):
        flat_record(name="llama", instance_id="llama-1", runtime=Runtime.OLLAMA,
                    mode=Mode.MANAGED, we_loaded=True)
    assert LOADED.load == LoadedModel(tag="llama3:8b", ours=True) and LOADED.we_loaded
    unloaded = after_decision(LOADED, None, _decision(Unload(tag="llama3:8b"), Reason.EXPOSED),
                              RoleObservation(name="llama"), ActionFacts(ok=True), 5.0)
    assert unloaded is not None and unloaded.load == LoadedModel(tag="llama3:8b", ours=False)


@pytest.mark.parametrize("ok", [True, False], ids=["ok", "failed"])
@pytest.mark.parametrize("act", SAMPLES, ids=lambda a: type(a).__name__)
def test_no_verb_gives_a_role_a_part_of_another_kind(act, ok: bool) -> None:
    """§2/§3 a server we start never holds a load, a model we load on Ollama never holds a
    process, whatever the verb and however it went; a start holds the process it spawned
    (its pid and create time, one part), and no intent is left once its outcome is known."""
    server_verb = not isinstance(act, (Load, Unload))
    record = attrs.evolve(SERVER if server_verb else LOADED,
                          intent=Intent(verb=str(act.verb), reason="spec_changed",
                                        instance_id="x-1", stops=10 if server_verb else None))
    observation = RoleObservation(name=record.name, process=ALIVE if server_verb else None)
    facts = ActionFacts(ok=ok, exited=True, pid=20 if ok else None,
                        create_time=2.0 if ok else None)
    after = after_decision(record, None, _decision(act, Reason.SPEC_CHANGED), observation,
                           facts, 5.0)
    if after is None:
        return  # forgotten: nothing held
    assert after.intent is None
    if server_verb:
        assert after.load is None
        if isinstance(act, (Start, Restart)) and ok:
            assert after.process == ServerProcess(pid=20, create_time=2.0)
    else:
        assert after.process is None


def test_a_first_record_holds_only_its_own_kind() -> None:
    """§2/§3 a role's first record: a started server's holds its process and no load; a
    first Ollama load's holds the tag, ours, and no process."""
    server = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                      serve=ServeSpec(port=8090))
    started = after_decision(None, server, _decision(Start(launch=None), Reason.MISSING),
                             RoleObservation(name="chat"),
                             ActionFacts(ok=True, pid=20, create_time=2.0), 5.0)
    assert started is not None and started.load is None
    assert started.process == ServerProcess(pid=20, create_time=2.0)
    ollama = RoleSpec(name="llama", runtime=Runtime.OLLAMA, mode=Mode.MANAGED, model="tiny",
                      serve=ServeSpec(port=11434))
    loaded = after_decision(None, ollama, _decision(Load(tag="llama3:8b"), Reason.MISSING),
                            RoleObservation(name="llama"), ActionFacts(ok=True), 5.0)
    assert loaded is not None and loaded.process is None
    assert loaded.load == LoadedModel(tag="llama3:8b", ours=True)


def _decision(act, reason: Reason) -> Decision:
    return Decision(role="x", act=act, reason=reason, status=Status.RUNNING)


def test_the_flat_names_read_the_parts() -> None:
    """The record's flat names (what status, readopt and the shell read) are its parts'."""
    assert isinstance(SERVER, RoleRecord)
    assert (SERVER.model_tag, SERVER.we_loaded) == (None, False)
    assert (LOADED.pid, LOADED.create_time, LOADED.model_tag) == (None, None, "llama3:8b")
