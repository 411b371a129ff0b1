"""The role fields that stand for server flags, env, aliases and repository files (§1.4, §9)."""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from reconciler.core.desired import Runtime
from reconciler.manifests import loader
from reconciler.manifests.roleextras import env_problem
from reconciler.planner import identity
from reconciler.repo import repofiles, sources

SHA = "a" * 64
HEAD = f"""\
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {{name: node}}
spec: {{allowed_ports: {{from: 8000, to: 9000}}, serve_programs: {{llamacpp: /bin/true}}}}
---
apiVersion: reconciler/v1
kind: Model
metadata: {{name: m}}
spec: {{format: gguf, root: /srv/m, shards: [{{path: m.gguf, size: 1, sha256: {SHA}}}]}}
---
apiVersion: reconciler/v1
kind: Model
metadata: {{name: proj}}
spec: {{format: gguf, root: /srv/p, shards: [{{path: mmproj.gguf, size: 1, sha256: {SHA}}}]}}
---
apiVersion: reconciler/v1
kind: Model
metadata: {{name: lora}}
spec: {{format: gguf, root: /srv/l, shards: [{{path: lora.gguf, size: 1, sha256: {SHA}}}]}}
"""


def role(serve: str = "", more: str = "", name: str = "r", port: int = 8080,
         runtime: str = "llamacpp", model: str = "m") -> str:
    return textwrap.dedent(f"""\
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: {name}}}
        spec:
          runtime: {runtime}
          mode: managed
          model: {model}
          serve: {{port: {port}{', ' + serve if serve else ''}}}
        """) + (textwrap.indent(textwrap.dedent(more), "  ") + "\n" if more else "")


def load(*roles: str, repo_files=None):
    return loader.load([("m.yaml", (HEAD + "".join(roles)).encode())], repo_files=repo_files)


def messages(result) -> list[str]:
    return [f"{p.path}: {p.message}" for p in result.problems]


def argv_of(result, name: str = "r") -> tuple[str, ...]:
    desired = result.desired
    assert desired is not None, messages(result)
    spec = next(r for r in desired.roles if r.name == name)
    launch = identity.launch(spec, {m.name: m for m in desired.models}, desired.node, {}, "/d")
    assert launch is not None
    return launch.argv


def test_cache_types_k_and_v_differ_and_kv_quant_means_both() -> None:
    """cache_type_k / _v each set one flag; kv_quant sets both; a field overrides it."""
    argv = argv_of(load(role("cache_type_k: q8_0, cache_type_v: q4_0")))
    assert argv[argv.index("--cache-type-k") + 1] == "q8_0"
    assert argv[argv.index("--cache-type-v") + 1] == "q4_0"
    argv = argv_of(load(role("kv_quant: q8_0, cache_type_v: f16")))
    assert argv[argv.index("--cache-type-k") + 1] == "q8_0"
    assert argv[argv.index("--cache-type-v") + 1] == "f16"


def test_weight_files_are_model_references() -> None:
    """mmproj and loras name Models; their first shard is launched; unknown names refused."""
    argv = argv_of(load(role("mmproj: proj, loras: [{model: lora, scale: 0.5}]")))
    assert argv[argv.index("--mmproj") + 1] == "/srv/p/mmproj.gguf"
    assert argv[argv.index("--lora-scaled") + 1] == "/srv/l/lora.gguf:0.5"
    result = load(role("mmproj: nosuch, loras: [{model: gone}]"))
    assert sorted(messages(result)) == ["$.spec.serve.loras[0].model: no Model named 'gone'",
                                        "$.spec.serve.mmproj: no Model named 'nosuch'"]


def test_weight_refs_are_verified_like_the_model() -> None:
    """Every weight reference is among the models a managed role needs verified."""
    desired = load(role("mmproj: proj, loras: [{model: lora}]")).desired
    assert desired is not None
    (spec,) = desired.roles
    assert set(spec.serve.weight_refs) == {"proj", "lora"}


def test_api_key_file_is_an_absolute_path_passed_as_a_file() -> None:
    """The key file's path reaches --api-key-file; the key itself never is in a manifest."""
    argv = argv_of(load(role("api_key_file: /etc/reconciler/key")))
    assert argv[argv.index("--api-key-file") + 1] == "/etc/reconciler/key"
    assert messages(load(role("api_key_file: key.txt"))) == [
        "$.spec.serve.api_key_file: must be an absolute path on the node (the key never goes "
        "into the manifests), not 'key.txt'"]


def test_env_names_come_from_the_runtime_allowlist() -> None:
    """GGML_*/CUDA ordering pass; LLAMA_ARG_*, PATH, LD_*, PYTHON*, the marker never do."""
    assert env_problem(Runtime.LLAMACPP, "GGML_VK_VISIBLE_DEVICES", "0") is None
    assert env_problem(Runtime.LLAMACPP, "CUDA_VISIBLE_DEVICES", "0,1") is None
    for name in ("LLAMA_ARG_HOST", "PATH", "LD_PRELOAD", "PYTHONPATH", "RECONCILER_INSTANCE",
                 "HF_TOKEN", "RANDOM_THING"):
        assert env_problem(Runtime.LLAMACPP, name, "x"), name
    assert "around the flag table" in env_problem(Runtime.LLAMACPP, "LLAMA_ARG_PORT", "1")
    assert env_problem(Runtime.MLX_LM, "GGML_X", "1")  # another runtime's variable


def test_env_joins_the_launch_and_its_digest() -> None:
    """A role's env is in its launch; changing it changes the digest; others keep theirs."""
    one = load(role(more="env: {CUDA_VISIBLE_DEVICES: '0'}"), role(name="s", port=8081))
    two = load(role(more="env: {CUDA_VISIBLE_DEVICES: '1'}"), role(name="s", port=8081))
    launches = []
    for result in (one, two):
        d = result.desired
        assert d is not None, messages(result)
        models = {m.name: m for m in d.models}
        launches.append({r.name: identity.launch(r, models, d.node, {}, "/d") for r in d.roles})
    assert ("CUDA_VISIBLE_DEVICES", "0") in launches[0]["r"].env
    assert launches[0]["r"].digest != launches[1]["r"].digest
    assert launches[0]["s"].digest == launches[1]["s"].digest
    launcher = identity.Launcher(one.desired.node, {}, "/d")
    spec = next(r for r in one.desired.roles if r.name == "r")
    models = {m.name: m for m in one.desired.models}
    argv = launcher.argv(spec, models)
    assert launcher.digest(argv, "x", role=spec) == launcher.launch(argv, "x", role=spec).digest


def test_aliases_are_any_text_and_collisions_are_refused() -> None:
    """`Qwen/Qwen3-8B` is an alias; a name two roles of one node claim is a problem."""
    result = load(role(more="aliases: [Qwen/Qwen3-8B, 'my model']"))
    assert result.desired is not None, messages(result)
    assert result.desired.roles[0].aliases == ("Qwen/Qwen3-8B", "my model")
    clash = load(role(more="aliases: [shared]"), role(name="s", port=8081, more="aliases: [r]"),
                 role(name="t", port=8082, more="aliases: [shared]"))
    assert messages(clash) == [
        "$.spec.aliases[0]: 'r' is also a name of role 'r' (m.yaml:21) on this node: "
        "a name a client sends must mean one role",
        "$.spec.aliases[0]: 'shared' is also a name of role 'r' (m.yaml:21) on this node: "
        "a name a client sends must mean one role"]


def test_mlx_adapter_and_draft_are_models() -> None:
    """mlx-lm's --adapter-path and --draft-model come from Model documents."""
    mlx = textwrap.dedent(f"""\
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: mx}}
        spec: {{format: mlx, root: /srv/mx, shards: [{{path: model.safetensors, size: 1, sha256: {SHA}}}]}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: ad}}
        spec: {{format: mlx, root: /srv/ad, shards: [{{path: adapters.safetensors, size: 1, sha256: {SHA}}}]}}
        """)
    result = load(mlx, role("adapter: ad, draft_model: mx", runtime="mlx-lm", model="mx"))
    assert result.desired is not None, messages(result)
    spec = result.desired.roles[0]
    from reconciler.runtimes import launch_argv
    argv = launch_argv(spec, result.desired.model("mx"), result.desired.model("mx"),
                       {m.name: m for m in result.desired.models})
    assert argv[argv.index("--adapter-path") + 1] == "/srv/ad"
    assert argv[argv.index("--draft-model") + 1] == "/srv/mx"
    assert messages(load(mlx, role("adapter: mx")))  # llama.cpp takes no adapter


# ---------------------------------------------------------------- repository files


def write_repo(tmp_path: Path, template: bytes) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "roles").mkdir(exist_ok=True)
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "chat.jinja").write_bytes(template)
    (tmp_path / "roles" / "all.yaml").write_text(
        HEAD + role("extra_args: [--jinja, --chat-template-file, ../templates/chat.jinja]"))
    return tmp_path / "roles"


def test_a_file_flag_reads_the_repository_and_launches_a_copy(tmp_path: Path) -> None:
    """The value is relative to the manifest; its copy (named by digest) is launched."""
    result = sources.load_desired([str(write_repo(tmp_path, b"{{ hi }}"))])
    argv = argv_of(result)
    copy = f"files/{hashlib.sha256(b'{{ hi }}').hexdigest()[:16]}-chat.jinja"
    assert argv[argv.index("--chat-template-file") + 1] == copy
    d = result.desired
    launch = identity.launch(d.roles[0], {m.name: m for m in d.models}, d.node, {}, "/d")
    assert launch.files == ((copy, b"{{ hi }}"),)


def test_a_file_outside_the_repository_is_refused(tmp_path: Path) -> None:
    """`..` out of the repository, a symlink out, a missing or oversized file: problems."""
    repo = tmp_path / "repo"
    repo.mkdir()
    roles = write_repo(repo, b"x")
    (tmp_path / "secret").write_text("s")
    (repo / "templates" / "link.jinja").symlink_to(tmp_path / "secret")
    (repo / "templates" / "big.jinja").write_bytes(b"x" * (repofiles.MAX_BYTES + 1))
    for path in ("../../secret", "../templates/link.jinja", "../templates/none.jinja",
                 "../templates/big.jinja", "../templates"):
        (roles / "all.yaml").write_text(HEAD + role(f"extra_args: [--grammar-file, '{path}']"))
        result = sources.load_desired([str(roles)])
        assert result.problems and "--grammar-file" in result.problems[0].message, path


def test_without_a_reader_a_file_flag_is_a_problem() -> None:
    """The pure loader alone cannot read files: it says so instead of launching a path."""
    assert "read only when" in messages(load(role("extra_args: [--grammar-file, g.gbnf]")))[0]


@settings(max_examples=20, deadline=None)
@given(first=st.binary(max_size=64), second=st.binary(max_size=64))
def test_an_edited_file_is_a_new_generation_an_unchanged_one_is_not(first: bytes,
                                                                     second: bytes) -> None:
    """Property: the launch digest changes exactly when the file's content does."""
    def digest(content: bytes) -> str:
        files = {("m.yaml", "t.jinja"): content}
        result = load(role("extra_args: [--chat-template-file, t.jinja]"), repo_files=files)
        d = result.desired
        assert d is not None, messages(result)
        return identity.launch(d.roles[0], {m.name: m for m in d.models}, d.node, {}, "/d").digest

    assert (digest(first) == digest(second)) == (first == second)
    assert digest(first) == digest(first)
