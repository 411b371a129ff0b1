"""§1.5: deleting a role that another role's ``excludes`` names is a warning, and the removal applies."""

from __future__ import annotations

import textwrap

from reconciler.engine import loop
from reconciler.repo import sources
from reconciler.core.decisions import Reason, Verb
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import RoleRecord
from reconciler.state.store import Store

NOW = 1_700_000_000.0

NODE_AND_A = """\
    apiVersion: reconciler/v1
    kind: NodeConfig
    metadata: {name: node}
    spec:
      allowed_ports: {from: 8000, to: 8999}
    ---
    apiVersion: reconciler/v1
    kind: InferenceSpec
    metadata: {name: a}
    spec: {runtime: llamacpp, mode: adopted, serve: {port: 8998}, excludes: [role:b]}
    """
B = """\
    apiVersion: reconciler/v1
    kind: InferenceSpec
    metadata: {name: b}
    spec: {runtime: llamacpp, mode: adopted, serve: {port: 8997}}
    """


def _site(tmp_path, *, with_b: bool):
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "a.yaml").write_text(textwrap.dedent(NODE_AND_A))
    b = manifests / "b.yaml"
    if with_b:
        b.write_text(textwrap.dedent(B))
    elif b.exists():
        b.unlink()
    return manifests


def test_unknown_exclude_is_a_warning_with_its_place(tmp_path):
    """`excludes: [role:b]` without a role b: no problem, one warning FILE:LINE: $.path."""
    manifests = _site(tmp_path, with_b=False)
    result = sources.load_desired([str(manifests)])
    assert result.problems == ()
    assert result.desired is not None
    assert [(w.file.rsplit("/", 1)[-1], w.line, w.path, w.message) for w in result.warnings] == [
        ("a.yaml", 10, "$.spec.excludes[0]", "no InferenceSpec named 'b'; it excludes nothing")]


def test_removing_an_excluded_role_is_applied(tmp_path):
    """The pass after b's file is deleted forgets b (it was valid, so it acts), despite a's exclude."""
    manifests = _site(tmp_path, with_b=True)
    with Store(tmp_path / "state") as store:
        store.put_role(RoleRecord(name="b", instance_id="b-00000000", runtime=Runtime.LLAMACPP,
                                  mode=Mode.ADOPTED, port=8997))
        inputs = loop.PassInputs(paths=[str(manifests)], store=store,
                                 state_dir=str(tmp_path / "state"), clock=lambda: NOW)
        kept = loop.apply_pass(inputs)
        assert kept.problems == () and store.role("b") is not None
        _site(tmp_path, with_b=False)
        result = loop.apply_pass(inputs)
        assert result.problems == ()
        assert len(result.warnings) == 1
        d = result.plan.decision("b")
        assert d is not None and (d.verb, d.reason) == (Verb.FORGET, Reason.REMOVED)
        assert store.role("b") is None
