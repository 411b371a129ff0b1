"""Model sources and NodeConfig.fetch as the loader reads them (BEHAVIOUR §1.3, §1.6)."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("url", [
    "http://127.0.0.999:8000/x.gguf", "http://127.1.2.3:8000/x.gguf", "http://127.0.0.1/x.gguf",
    "http://localhost:8000/x.gguf", "http://[::1]:8000/x.gguf", "http://127.256.0.1/x.gguf",
    "http://127.0.0.1.example/x.gguf", "https://mirror.example/x.gguf",
])
def test_validate_and_fetch_agree_on_a_loopback_mirror(url: str) -> None:
    """§1.6/§5 plain http only to a loopback mirror: validation asks the loopback owner, so a
    Model ``url`` and a ``fetch.hf_endpoint`` validate exactly when the fetch would use them
    (``http://127.0.0.999`` passed the schema's pattern and every fetch then refused it)."""
    from reconciler.models import fetchpolicy

    fetchable = fetchpolicy.url_refusal(url) is None
    model = _load(f"shards: [{{path: m.gguf, size: 10, sha256: {SHA}, url: '{url}'}}]")
    endpoint = _load(f"root: /srv, shards: [{{path: m.gguf, size: 10, sha256: {SHA}}}]",
                     f", fetch: {{cache: /var/cache/r, hf_endpoint: '{url}'}}")
    assert model.ok is fetchable, messages(model)
    assert endpoint.ok is fetchable, messages(endpoint)


def test_a_plain_http_mirror_beyond_loopback_is_refused_where_it_is_written(tmp_path,
                                                                          capsys) -> None:
    """§1.5/§1.6: ``validate`` reports ``FILE:LINE: $.path: message`` for a URL that is not
    loopback although it looks like 127.x (``127.0.0.999``), and exits 1."""
    from reconciler.cli import main

    (tmp_path / "m.yaml").write_text(
        "apiVersion: reconciler/v1\nkind: Model\nmetadata: {name: m}\nspec:\n  format: gguf\n"
        f"  shards:\n    - {{path: m.gguf, size: 10, sha256: {SHA},\n"
        "       url: 'http://127.0.0.999:8000/x.gguf'}\n"
        "---\napiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\nspec:\n"
        "  fetch: {cache: /var/cache/r, hf_endpoint: 'http://127.0.0.999:8080'}\n")
    assert main(["validate", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(": ", 2)[:2] for ln in lines[:2]] == [
        [f"{tmp_path}/m.yaml:8", "$.spec.shards[0].url"],
        [f"{tmp_path}/m.yaml:14", "$.spec.fetch.hf_endpoint"]], lines
    assert all("'127.0.0.999:80" in ln and "not loopback" in ln for ln in lines[:2]), lines
