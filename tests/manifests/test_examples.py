"""The example manifests are valid, editor-ready, and load into the values the planner uses."""

from __future__ import annotations

import re
from pathlib import Path

from reconciler.repo import sources
from reconciler.core.desired import Mode, RestartPolicy, Runtime

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "manifests" / "examples"


def _load():
    result = sources.load_desired([str(EXAMPLES)])
    assert result.problems == ()
    assert result.desired is not None
    return result


def test_examples_are_valid_and_counted() -> None:
    """The examples load without problems and count every kind; §14 the mlx-lm
    program is still a path (the llama.cpp one a pinned Program): `validate` says it is not
    pinned; §1.4 the release Program's b11500 has no flag table of its own: one warning
    names the build whose table judges it."""
    result = _load()
    assert [w.message for w in result.warnings] == [
        "no flag table for llama-server b11500: its roles' extra_args are judged by b11434's "
        "(the nearest older build with one)"]
    assert [w.path for w in result.unpinned] == ["$.spec.serve_programs.mlx-lm"]
    assert result.summary == ("13 documents: 5 Model, 5 InferenceSpec, 1 NodeConfig, "
                              "2 Program")


def test_examples_cover_each_role_kind() -> None:
    """Every runtime has an example; the managed ones managed, plus an adopted llama.cpp role."""
    desired = _load().desired
    kinds = {(r.runtime, r.mode) for r in desired.roles}
    assert kinds == {(Runtime.LLAMACPP, Mode.MANAGED), (Runtime.MLX_LM, Mode.MANAGED),
                     (Runtime.OLLAMA, Mode.MANAGED), (Runtime.LLAMACPP, Mode.ADOPTED),
                     (Runtime.OPENAI, Mode.ADOPTED)}
    assert {runtime for runtime, _ in kinds} == set(Runtime)


def test_every_example_names_its_schema() -> None:
    """Each example file starts with a yaml-language-server $schema line that resolves."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        m = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
        assert m, path
        assert (path.parent / m.group(1)).resolve().is_file(), path


def test_defaults_are_merged_into_roles() -> None:
    """Restart policy, keep_alive, weights, host and the Ollama port come out merged."""
    desired = _load().desired
    coder, chat, planner = desired.role("coder"), desired.role("chat"), desired.role("planner")
    assert coder.restart == RestartPolicy(max_restarts=3, base=2.0, cap=30.0, stable_after=60.0,
                                          startup_grace=180.0)
    assert coder.restarted_at == "2026-12-01T07:00:00Z"
    assert desired.role("planner").restarted_at is None
    assert desired.node.restart.startup_grace == 120.0
    assert coder.memory.weights == desired.model("qwen2.5-coder-7b-q4").weights_size
    assert coder.memory.kv == 1_200_000_000
    assert coder.excludes == frozenset({"planner"})
    assert coder.keep_alive is None
    assert chat.keep_alive == 600.0 and chat.serve.port == 11434
    assert planner.serve.host == "127.0.0.1"  # from localhost
    assert desired.role("voice").memory.weights == 2 * 2**30
    assert desired.node.allowed_ports is not None and 11434 in desired.node.allowed_ports
    assert desired.node.serve_program(Runtime.LLAMACPP) == "llama-b11434"  # §14 a Program
    program = desired.program_for(desired.role("coder"))
    assert program is not None and program.executable == "/usr/local/bin/llama-server"
    assert [r.name for r in desired.roles] == sorted(r.name for r in desired.roles)


def test_values_carry_their_source() -> None:
    """Each role and model carries the file and line of its document."""
    desired = _load().desired
    ref = desired.role("coder").ref
    assert ref is not None and ref.file.endswith("coder.yaml") and ref.line == 3
    assert all(m.ref is not None for m in desired.models)


def _load_text(text: str):
    from reconciler.manifests import loader

    return loader.load([("t.yaml", text.encode())])


NODE = "apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"


def test_node_defaults_and_explicit_empty_passthrough() -> None:
    """An absent NodeConfig field takes its default; an explicit empty list stays empty."""
    node = _load_text(NODE + "spec: {}\n").desired.node
    assert node.env_passthrough == ("HOME", "PATH") and node.keep_alive == 1800.0
    assert node.probe_timeout == 2.0 and node.deep_timeout == 300.0 and node.stop_grace == 5.0
    node = _load_text(NODE + "spec: {env_passthrough: [], keep_alive: -1}\n").desired.node
    assert node.env_passthrough == () and node.keep_alive == -1.0


def test_warnings_for_ignored_and_unstartable() -> None:
    """ctx on mlx-lm is ignored and a managed role without a serve program cannot start: warned."""
    result = _load_text(
        NODE + "spec: {allowed_ports: {from: 1, to: 65535}}\n---\n"
        "apiVersion: reconciler/v1\nkind: Model\nmetadata: {name: m}\n"
        "spec: {format: mlx, root: /m, shards: [{path: w, size: 1, sha256: " + "a" * 64 + "}]}\n"
        "---\napiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {name: v}\n"
        "spec: {runtime: mlx-lm, mode: managed, model: m, serve: {port: 9, ctx: 4}}\n")
    assert result.problems == ()
    assert [(w.line, w.path) for w in result.warnings] == [(14, "$.spec.runtime"),
                                                           (14, "$.spec.serve.ctx")]


def test_on_demand_example_is_valid_and_cannot_hold_both_roles() -> None:
    """manifests/examples/on-demand/: a router and two on-demand roles the budget cannot hold together."""
    result = sources.load_desired([str(EXAMPLES / "on-demand")])
    assert result.problems == () and result.warnings == ()
    desired = result.desired
    router = desired.node.router
    assert router is not None and (router.host, router.port) == ("127.0.0.1", 9000)
    roles = [desired.role("coder"), desired.role("chat")]
    assert all(r.on_demand for r in roles)
    sizes = [r.memory.weights + r.memory.kv for r in roles]
    assert max(sizes) <= desired.node.memory_budget < sum(sizes)


def test_idle_after_on_a_role_that_is_not_on_demand_is_a_warning() -> None:
    """Rule (§1.5: an ignored field is a warning): idle_after on a running role is ignored,
    so it is warned at its line; on an on-demand role it is taken, without a warning."""
    head = (NODE + "spec: {allowed_ports: {from: 1, to: 65535}, router: {listen: '127.0.0.1:9000'}}\n"
            "---\napiVersion: reconciler/v1\nkind: Model\nmetadata: {name: m}\n"
            "spec: {format: gguf, root: /m, shards: [{path: w, size: 1, sha256: " + "a" * 64 + "}]}\n"
            "---\napiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {name: v}\n"
            "spec: {runtime: llamacpp, mode: managed, model: m, serve: {port: 9}, idle_after: 5m")
    result = _load_text(head + "}\n")
    assert result.problems == ()
    assert [(w.path, w.message) for w in result.warnings if "idle" in w.path] == [
        ("$.spec.idle_after", "ignored: only a role with state: on-demand is stopped when idle "
                              "(this one is running)")]
    result = _load_text(head + ", state: on-demand}\n")
    assert result.problems == ()
    assert [w for w in result.warnings if "idle" in w.path] == []
    assert result.desired.role("v").idle_after == 300.0
