"""Model sources and NodeConfig.fetch as the loader reads them (BEHAVIOUR §1.3, §1.6)."""

from __future__ import annotations

from reconciler.core.desired import FetchConfig
from reconciler.manifests import loader

SHA = "a" * 64
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _load(model_spec: str, node_spec: str = ""):
    text = ("apiVersion: reconciler/v1\nkind: Model\nmetadata: {name: m}\n"
            f"spec: {{format: gguf, {model_spec}}}\n"
            "---\napiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\n"
            f"spec: {{allowed_ports: {{from: 8000, to: 8999}}{node_spec}}}\n")
    return loader.load([("m.yaml", text.encode())])


def messages(result) -> list[str]:
    return [f"{p.path}: {p.message}" for p in result.problems]


def test_a_hub_source_at_a_commit_needs_no_root() -> None:
    """§1.6 a Model with a Hub source at a commit is fetchable without a root; its files resolve at
    that commit."""
    result = _load(f"source: {{hf: org/r, revision: {COMMIT}}}, "
                   f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]")
    assert result.ok, messages(result)
    (model,) = result.fleet.models
    assert model.fetchable and model.root is None
    assert model.fetch_url(model.shards[0], "https://huggingface.co") == \
        f"https://huggingface.co/org/r/resolve/{COMMIT}/m.gguf"


def test_a_branch_as_revision_is_refused_saying_why() -> None:
    """§1.6 a branch as ``revision`` is refused, saying it must be a commit because a branch moves."""
    result = _load(f"source: {{hf: org/r, revision: main}}, "
                   f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]")
    (msg,) = messages(result)
    assert msg.startswith("$.spec.source.revision: must be a commit") and "moves" in msg


def test_a_repository_without_a_commit_is_refused() -> None:
    """§1.6 a Hub source without ``revision`` is refused: a source is a repository at a commit."""
    result = _load(f"source: {{hf: org/r}}, root: /srv, "
                   f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]")
    assert messages(result) == ["$.spec.source: 'hf' needs 'revision': a Hub source is a "
                                "repository at a commit"]


def test_a_plain_http_url_beyond_loopback_is_refused() -> None:
    """§1.6/§5 a file ``url`` over plain http to a host beyond loopback is refused (https only)."""
    result = _load(f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}, "
                   "url: 'http://example.com/m.gguf'}]")
    (msg,) = messages(result)
    assert msg.startswith("$.spec.shards[0].url: must be an https:// URL")


def test_a_model_without_root_must_have_a_source_for_every_file() -> None:
    """§1.6 a Model without a ``root`` and without a source for its files is refused: it could never
    be found."""
    result = _load(f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]")
    assert any("missing required key 'root'" in m for m in messages(result)), messages(result)


def test_a_url_file_is_fetchable_and_a_mix_is_not_without_a_root() -> None:
    """§1.6 files that all have a ``url`` are fetchable without a root; a mix with a file of no
    source is not."""
    ok = _load(f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}, "
               "url: 'https://mirror.example/m.gguf'}]")
    assert ok.ok, messages(ok)
    mixed = _load(f"shards: [{{path: a.gguf, size: 10, sha256: {SHA}, "
                  f"url: 'https://x.example/a'}}, {{path: b.gguf, size: 10, sha256: {SHA}}}]")
    assert not mixed.ok


def test_a_sourced_file_needs_its_size() -> None:
    """§1.6 every file of a sourced Model declares its size (the disk check and the resume need it)."""
    result = _load(f"source: {{hf: org/r, revision: {COMMIT}}}, root: /srv, "
                   f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}], "
                   f"tokenizer: {{path: tokenizer.json, sha256: {SHA}}}")
    assert any(m.startswith("$.spec.tokenizer: missing required key 'size'")
               for m in messages(result)), messages(result)


def test_fetch_fields_are_parsed_with_units() -> None:
    """§1.6 NodeConfig ``fetch``: cache, parallelism, ``min_free`` with units, the endpoint
    (trailing slash dropped) and the token file."""
    result = _load(f"root: /srv, shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]",
                   ", fetch: {cache: /var/cache/r, max_parallel: 4, min_free: 2GiB, "
                   "hf_endpoint: 'http://127.0.0.1:9000/', hf_token_file: /etc/hf}")
    assert result.ok, messages(result)
    (node,) = result.fleet.nodes
    assert node.fetch == FetchConfig(cache="/var/cache/r", max_parallel=4, min_free=2 * 2**30,
                                     hf_endpoint="http://127.0.0.1:9000",
                                     hf_token_file="/etc/hf")
