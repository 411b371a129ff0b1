"""The two entry points of a pass: plan_pass writes nothing, apply_pass records (no servers needed)."""

from __future__ import annotations

import socket
import sqlite3
import textwrap

import pytest

from reconciler.engine import loop
from reconciler.core.decisions import Reason, Verb
from reconciler.core.events import EventKind
from reconciler.state.store import Store

NOW = 1_700_000_000.0
SHA = "a" * 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def site(tmp_path):
    """A manifest set with one managed llama.cpp role on a port nothing listens on."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(b"GGUF")
    port = free_port()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "all.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: node}}
        spec:
          allowed_ports: {{from: {port}, to: {port}}}
          serve_programs: {{llamacpp: /usr/bin/true}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec:
          format: gguf
          root: {models}
          shards: [{{path: tiny.gguf, size: 4, sha256: {SHA}}}]
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: chat}}
        spec:
          runtime: llamacpp
          mode: managed
          model: tiny
          serve: {{port: {port}}}
        """))
    return tmp_path


def inputs(site, store) -> loop.PassInputs:
    return loop.PassInputs(paths=[str(site / "manifests")], store=store,
                           state_dir=str(site / "state"), clock=lambda: NOW)


def test_plan_pass_writes_nothing_to_the_store(site):
    """A plan-only pass plans the start and commits nothing (no record, no event)."""
    with Store(site / "state") as store:
        other = sqlite3.connect(site / "state" / "state.db")
        try:
            before = other.execute("PRAGMA data_version").fetchone()[0]
            result = loop.plan_pass(inputs(site, store))
            assert other.execute("PRAGMA data_version").fetchone()[0] == before
        finally:
            other.close()
        assert [(d.role, d.verb, d.reason) for d in result.plan.decisions] == [
            ("chat", Verb.START, Reason.MISSING)]
        assert result.outcomes == () and store.roles() == () and store.events() == []


def test_the_observe_room_brings_the_stores_sticky_mismatch(site):
    """A model the store holds a sticky mismatch for is refused, in plan and apply alike."""
    with Store(site / "state") as store:
        store.set_sticky("tiny", "model tiny: shard tiny.gguf hash mismatch")
        planned = loop.plan_pass(inputs(site, store))
        assert planned.observed.model("tiny").detail == "model tiny: shard tiny.gguf hash mismatch"
        (decision,) = planned.plan.decisions
        assert (decision.verb, decision.reason) == (Verb.REFUSE, Reason.MODEL_UNVERIFIED)
        assert store.events() == []

        applied = loop.apply_pass(inputs(site, store))
        assert applied.plan == planned.plan and applied.outcomes == ()
        [event] = store.events("chat")
        assert (event.kind, event.reason, event.at) == (EventKind.REFUSE, "model_unverified", NOW)
        loop.apply_pass(inputs(site, store))
        assert len(store.events("chat")) == 1  # the same refusal again is not news


def test_invalid_manifests_plan_and_write_nothing(site):
    """A manifest problem: no plan, every problem returned, the store untouched."""
    (site / "manifests" / "all.yaml").write_text("apiVersion: reconciler/v1\nkind: Nope\n")
    with Store(site / "state") as store:
        for run in (loop.plan_pass, loop.apply_pass):
            result = run(inputs(site, store))
            assert result.plan is None and result.problems
        assert store.events() == [] and store.roles() == ()
