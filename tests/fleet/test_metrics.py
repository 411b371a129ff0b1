"""Fleet metrics: a node's name on every series, and what each pass did by verb and reason."""

from __future__ import annotations

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.report import metrics
from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.state.store import Store
from tests.support.fakes import bad, desired, good, keep


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "state") as s:
        yield s


def series(text: str, name: str) -> dict:
    family = next(f for f in text_string_to_metric_families(text) if f.name == name)
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def test_acting_decisions_are_counted_by_verb_and_reason(store):
    """reconciler_last_pass_actions counts starts and stops by reason; keeps are not actions."""
    stop = flat(role="old", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED, status=Status.RUNNING)
    moved = attrs.evolve(stop, role="moved")
    start = flat(role="new", verb=Verb.START, reason=Reason.MISSING, status=Status.LOADED)
    result = good(desired("new", "kept"), stop, moved, start, keep("kept"))
    text = metrics.render_result(result, store)
    assert series(text, "reconciler_last_pass_actions") == {
        (("node", "test-node"), ("reason", "missing"), ("verb", "start")): 1,
        (("node", "test-node"), ("reason", "removed"), ("verb", "stop")): 2}


def test_a_node_not_in_the_fleet_still_names_itself(store):
    """With no desired state (not a member), the series carry the --node name."""
    result = attrs.evolve(bad("no NodeConfig is named 'gpu-9'"), node="gpu-9")
    text = metrics.render_result(result, store)
    assert series(text, "reconciler_manifest_problems") == {(("node", "gpu-9"),): 1}


def test_fetch_progress_is_published_per_model(store):
    """§1.6 reconciler_fetch_bytes_total and reconciler_fetch_remaining_bytes, from the pass's
    observation of the cache."""
    from reconciler.core.observed import FetchObservation, FetchState, Observed

    result = good(desired("new"))
    obs = FetchObservation(model="qwen", generation="g", state=FetchState.RUNNING,
                           total=1000, missing=400)
    result = attrs.evolve(result, observed=Observed(fetches=(obs,)))
    text = metrics.render_result(result, store)
    assert series(text, "reconciler_fetch_bytes") == {
        (("model", "qwen"), ("node", "test-node")): 600}
    assert series(text, "reconciler_fetch_remaining_bytes") == {
        (("model", "qwen"), ("node", "test-node")): 400}


def test_each_role_publishes_the_revision_and_generation_it_runs():
    """§13 reconciler_role_revision{role,revision,generation} is 1 per role of this node's
    share: the manifests commit of the pass, and the generation its record ran — what a
    rollout's gate reads. A role not in the share (being stopped) has no revision."""
    from reconciler.core.decisions import Reason
    from reconciler.core.desired import Mode, Runtime
    from reconciler.core.observed import RoleRecord

    class Records:
        def roles(self):
            return (RoleRecord(name="coder", instance_id="i", runtime=Runtime.LLAMACPP,
                               mode=Mode.MANAGED, generation="g-1"),)

    stop = flat(role="old", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED,
                status=Status.RUNNING)
    result = attrs.evolve(good(desired("coder", "chat"), keep("coder"), keep("chat"), stop),
                          git_commit="abc123")
    got = series(metrics.render_result(result, Records()), "reconciler_role_revision")
    assert {(dict(k)["role"], dict(k)["revision"], dict(k)["generation"]): v
            for k, v in got.items()} == {("coder", "abc123", "g-1"): 1, ("chat", "abc123", ""): 1}
