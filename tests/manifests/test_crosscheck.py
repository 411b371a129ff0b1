"""Cross-document rules and the defaults merged into each role (reconciler.crosscheck)."""

from __future__ import annotations

import textwrap

from reconciler.manifests import loader

NODE = """\
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {name: node}
spec: {keep_alive: 10m, allowed_ports: {from: 8000, to: 12000}}
---
apiVersion: reconciler/v1
kind: Model
metadata: {name: llama}
spec: {format: ollama, source: {ollama_tag: "llama3:8b"}}
"""


def load(text: str):
    return loader.load([("m.yaml", (NODE + "---\n" + textwrap.dedent(text)).encode())])


def test_keep_alive_defaults_from_the_node() -> None:
    """An Ollama role without keep_alive takes NodeConfig's; its own wins when given."""
    result = load("""\
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {name: chat}
        spec: {runtime: ollama, mode: managed, model: llama}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {name: quick}
        spec: {runtime: ollama, mode: managed, model: llama, keep_alive: 30s}
        """)
    assert result.desired is not None, result.problems
    assert {r.name: r.keep_alive for r in result.desired.roles} == {"chat": 600.0, "quick": 30.0}


def test_a_role_excluding_itself_is_refused_wherever_it_stands() -> None:
    """A role naming itself in excludes is a problem, first entry included."""
    result = load("""\
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {name: chat}
        spec: {runtime: ollama, mode: managed, model: llama, excludes: [chat]}
        """)
    assert [(p.path, p.message) for p in result.problems] == [
        ("$.spec.excludes[0]", "a role cannot exclude itself")]
