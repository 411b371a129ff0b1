"""Model documents and file kinds (the pure half of `reconcile models add`)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from reconciler.manifests import modeldoc
from reconciler.core.desired import ModelFormat
from reconciler.manifests.modeldoc import FileFact, FileKind
from reconciler.core.units import is_plain_token

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "model.schema.json"
H = "ab" * 32


def schema_errors(doc: dict) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]


@pytest.mark.parametrize("path, kind", [
    ("model.gguf", FileKind.WEIGHT), ("x/model-00001-of-00002.safetensors", FileKind.WEIGHT),
    ("pytorch_model.bin", FileKind.WEIGHT), ("weights.npz", FileKind.WEIGHT),
    ("tokenizer.json", FileKind.TOKENIZER), ("tokenizer.model", FileKind.TOKENIZER),
    ("chat_template.jinja", FileKind.TEMPLATE), ("config.json", FileKind.OTHER),
    ("sub/tokenizer.json", FileKind.OTHER), ("README.md", FileKind.OTHER),
])
def test_file_kind_by_name(path, kind):
    """Weights anywhere by suffix; tokenizer and template only at the top."""
    assert modeldoc.file_kind(path) is kind


@pytest.mark.parametrize("names, fmt", [
    (["a.gguf"], ModelFormat.GGUF),
    (["a.safetensors", "tokenizer.json"], ModelFormat.SAFETENSORS),
    (["weights.npz"], ModelFormat.MLX),
    (["a.gguf", "b.safetensors"], None),
    (["pytorch_model.bin"], None),
    (["README.md"], None),
])
def test_detect_format(names, fmt):
    """The format follows the weights' names; ambiguity asks for --format."""
    assert modeldoc.detect_format(names) == fmt


def test_mlx_quantization_hint_makes_safetensors_mlx():
    """An MLX conversion (quantization block in config.json) is format mlx."""
    assert modeldoc.detect_format(["model.safetensors"], mlx_quantized=True) is ModelFormat.MLX


def test_split_gguf_parts():
    """Any part of a split GGUF names all of its parts."""
    assert modeldoc.split_gguf_parts("big-Q4-00002-of-00003.gguf") == (
        "big-Q4-00001-of-00003.gguf", "big-Q4-00002-of-00003.gguf", "big-Q4-00003-of-00003.gguf")
    assert modeldoc.split_gguf_parts("single.gguf") is None


@pytest.mark.parametrize("files, chosen", [
    (["m.gguf"], ("m.gguf",)),
    (["x-00002-of-00002.gguf", "x-00001-of-00002.gguf"],
     ("x-00001-of-00002.gguf", "x-00002-of-00002.gguf")),
    (["q4/x-00001-of-00002.gguf", "q4/x-00002-of-00002.gguf"],
     ("q4/x-00001-of-00002.gguf", "q4/x-00002-of-00002.gguf")),
])
def test_one_gguf_model_accepts_one_model(files, chosen):
    """One file, or one complete split set (also in a subdirectory), is the model."""
    assert modeldoc.one_gguf_model(files, where="d") == chosen


@pytest.mark.parametrize("files, message", [
    (["a.gguf", "b.gguf"], "d holds 2 GGUF models, and a Model document describes one model:"),
    (["m.gguf", "mmproj-m.gguf"], "d holds 1 GGUF model and 1 projector"),
    (["m.gguf", "m-mmproj-f16.gguf", "mmproj-m.gguf"], "d holds 1 GGUF model and 2 projectors"),
    (["mmproj-m.gguf"], "d holds no GGUF model, only a multimodal projector"),
    (["x-00001-of-00003.gguf"], "split GGUF x-00001-of-00003.gguf in d is incomplete: 2 of 3"),
    (["q4/x-00001-of-00002.gguf", "q8/x-00001-of-00002.gguf", "q8/x-00002-of-00002.gguf"],
     "`reconcile models add d/q8/x-00001-of-00002.gguf`"),
    (["x-00001-of-00002.gguf", "x-00001-of-00003.gguf"], "  x-00001-of-00003.gguf  (split: 1 of 3"),
    ([], "no GGUF files in d"),
])
def test_one_gguf_model_refuses_anything_else(files, message):
    """Several models, projectors, incomplete or mixed split sets: a message naming them."""
    with pytest.raises(ValueError) as e:
        modeldoc.one_gguf_model(files, where="d")
    assert message in str(e.value)


def test_one_gguf_model_suggests_no_file_when_none_is_complete():
    """With only incomplete split sets there is no file to suggest."""
    with pytest.raises(ValueError) as e:
        modeldoc.one_gguf_model(["x-00001-of-00002.gguf", "y-00001-of-00002.gguf"], where="d")
    assert "e.g." not in str(e.value)


@pytest.mark.parametrize("text, name", [
    ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Qwen2.5-7B-Instruct-Q4_K_M"),
    ("big-00001-of-00003.gguf", "big"),
    ("my model (v2)", "my-model-v2"),
    ("..hidden..name", "hidden.name"),
    ("???", "model"),
])
def test_plain_name_examples(text, name):
    """Names come from file or directory names, made plain."""
    assert modeldoc.plain_name(text) == name


@given(st.text(max_size=200))
def test_plain_name_is_always_a_plain_token(text):
    """Whatever the file is called, the default name is a valid plain token."""
    assert is_plain_token(modeldoc.plain_name(text))


@pytest.mark.parametrize("path, ok", [
    ("a.gguf", True), ("sub/a.gguf", True), ("a+b:c_d-e.bin", True),
    ("../a", False), ("a/../b", False), ("/a", False), ("a//b", False), ("./a", False),
    ("", False), ("a b", False), ("a" * 129, False), ("a..b", False),
])
def test_safe_relpath(path, ok):
    """Shard paths: relative, plain components, no dot segments."""
    assert modeldoc.is_safe_relpath(path) is ok


def test_hf_cache_source():
    """An HF cache snapshot root tells the repository and the commit."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    assert modeldoc.hf_cache_source(f"/c/hub/models--Qwen--Qwen2.5-0.5B/snapshots/{rev}") == (
        "Qwen/Qwen2.5-0.5B", rev)
    assert modeldoc.hf_cache_source("/c/hub/models--a--b/snapshots/main") == ("a/b", None)
    assert modeldoc.hf_cache_source("/models/qwen") is None


def test_model_document_is_valid_and_sorted():
    """The document passes the Model schema; shards come sorted by path."""
    doc = modeldoc.model_document(
        name="qwen", fmt=ModelFormat.MLX, root="/models/qwen",
        shards=[FileFact(path="b.safetensors", size=2, sha256=H),
                FileFact(path="a.safetensors", size=1, sha256=H)],
        tokenizer=FileFact(path="tokenizer.json", size=3, sha256=H),
        template=FileFact(path="chat_template.jinja", size=4, sha256=H),
        hf=("Qwen/Qwen2.5", "main"),
    )
    assert schema_errors(doc) == []
    assert [s["path"] for s in doc["spec"]["shards"]] == ["a.safetensors", "b.safetensors"]
    assert doc["spec"]["tokenizer"] == {"path": "tokenizer.json", "sha256": H}
    assert doc["spec"]["source"] == {"hf_repo": "Qwen/Qwen2.5", "hf_revision": "main"}


def test_ollama_document_is_valid():
    """An Ollama model document has the tag and no root or shards."""
    doc = modeldoc.ollama_document(name="llama3.2:3b", tag="llama3.2:3b")
    assert schema_errors(doc) == []
    assert doc["spec"] == {"format": "ollama", "source": {"ollama_tag": "llama3.2:3b"}}


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "a/b"}, "plain token"),
    ({"root": "rel/dir"}, "not absolute"),
    ({"shards": []}, "no gguf weight files"),
    ({"shards": [FileFact(path="../x.gguf", size=1, sha256=H)]}, "safe relative path"),
    ({"shards": [FileFact(path="x.gguf", size=1, sha256="XYZ")]}, "not a sha256"),
    ({"shards": [FileFact(path=f"{i}.gguf", size=1, sha256=H) for i in range(256)]}, "at most 255"),
])
def test_model_document_refuses_what_cannot_be_valid(kwargs, message):
    """A document that would fail validation is not produced."""
    args = {"name": "m", "fmt": ModelFormat.GGUF, "root": "/m",
            "shards": [FileFact(path="x.gguf", size=1, sha256=H)], **kwargs}
    with pytest.raises(ValueError, match=message):
        modeldoc.model_document(**args)


def test_render_document_has_the_schema_line_and_round_trips():
    """The YAML starts with the editor's schema line and parses back to the same dict."""
    doc = modeldoc.ollama_document(name="m", tag="1:30")  # YAML 1.1 would read 1:30 as 90
    text = modeldoc.render_document(doc, "schemas/model.schema.json")
    assert text.splitlines()[0] == "# yaml-language-server: $schema=schemas/model.schema.json"
    assert yaml.safe_load(text) == doc


@pytest.mark.parametrize("text, parts, short", [
    ("llama3.2", ("manifests", "registry.ollama.ai", "library", "llama3.2", "latest"),
     "llama3.2:latest"),
    ("qwen2.5:7b", ("manifests", "registry.ollama.ai", "library", "qwen2.5", "7b"), "qwen2.5:7b"),
    ("me/tiny:q4", ("manifests", "registry.ollama.ai", "me", "tiny", "q4"), "me/tiny:q4"),
    ("hf.co/org/m:Q4_K_M", ("manifests", "hf.co", "org", "m", "Q4_K_M"), "hf.co/org/m:Q4_K_M"),
])
def test_parse_ollama_name(text, parts, short):
    """Ollama's name grammar, with its default host, namespace and tag."""
    name = modeldoc.parse_ollama_name(text)
    assert name.manifest_parts == parts
    assert name.short == short


@pytest.mark.parametrize("text", ["../../etc/passwd", "a/../../b:c", "x:..", "a:b:c", "/abs", "a/b/c/d", ""])
def test_parse_ollama_name_refuses_escapes(text):
    """A name that could leave Ollama's manifest directory is refused."""
    with pytest.raises(ValueError):
        modeldoc.parse_ollama_name(text)


def test_ollama_model_blob():
    """The model layer's digest names its blob file."""
    manifest = json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 5},
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + H, "size": 99},
    ]})
    assert modeldoc.ollama_model_blob(manifest) == (f"sha256-{H}", 99)
    with pytest.raises(ValueError, match="no application/vnd.ollama.image.model layer"):
        modeldoc.ollama_model_blob(json.dumps({"layers": []}))
    with pytest.raises(ValueError, match="malformed"):
        modeldoc.ollama_model_blob(json.dumps({"layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:../x", "size": 1}]}))


def test_weights_for_prefers_safetensors_over_pytorch_bin():
    """A repository shipping both safetensors and .bin weights is described by the safetensors."""
    names = ["model.safetensors", "pytorch_model.bin", "x.gguf", "w.npz"]
    assert modeldoc.weights_for(ModelFormat.SAFETENSORS, names) == ("model.safetensors",)
    assert modeldoc.weights_for(ModelFormat.MLX, names) == ("model.safetensors", "w.npz")
    assert modeldoc.weights_for(ModelFormat.GGUF, names) == ("x.gguf",)
    assert modeldoc.weights_for(ModelFormat.SAFETENSORS, ["pytorch_model.bin"]) == ("pytorch_model.bin",)
