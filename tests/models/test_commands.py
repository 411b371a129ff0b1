"""`reconcile models add` and `reconcile models verify` through the real command line."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from reconciler.manifests import loader
from reconciler.cli import main
from reconciler.core.desired import ModelFormat
from reconciler.core.observed import ModelState
from reconciler.models.modelstore import MemoryStampStore, Verifier

from .conftest import digest

W1, W2 = b"1" * 3000, b"2" * 2000


def add(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["models", "add", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def loaded_model(text: str):
    """The document through the real manifest loader (schema and rules)."""
    result = loader.load([("model.yaml", text.encode())])
    assert result.problems == (), [str(p) for p in result.problems]
    (model,) = result.desired.models
    return model


def listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in root.rglob("*")}


def test_add_gguf_file_round_trips_and_verifies(tmp_path, capsys):
    """A GGUF file becomes a valid Model document that then verifies; nothing is copied."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "Tiny-Q4_K_M.gguf").write_bytes(W1)
    before = listing(tmp_path)
    code, out, _ = add(capsys, str(tmp_path / "m" / "Tiny-Q4_K_M.gguf"))
    assert code == 0
    assert out.startswith("# yaml-language-server: $schema=")
    assert out.splitlines()[0].endswith("model.schema.json")
    model = loaded_model(out)
    assert (model.name, model.format, model.root) == ("Tiny-Q4_K_M", ModelFormat.GGUF, str(tmp_path / "m"))
    assert [(s.path, s.size, s.sha256) for s in model.shards] == [("Tiny-Q4_K_M.gguf", 3000, digest(W1))]
    assert Verifier(MemoryStampStore()).verify(model).state is ModelState.VERIFIED
    assert listing(tmp_path) == before


def test_add_split_gguf_takes_every_part(tmp_path, capsys):
    """Naming one part of a split GGUF describes all parts, sorted."""
    for i, data in ((1, W1), (2, W2)):
        (tmp_path / f"big-0000{i}-of-00002.gguf").write_bytes(data)
    code, out, _ = add(capsys, str(tmp_path / "big-00002-of-00002.gguf"), "--name", "big")
    assert code == 0
    model = loaded_model(out)
    assert [s.path for s in model.shards] == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]


def test_add_split_gguf_with_a_part_missing_fails(tmp_path, capsys):
    """A split GGUF with a missing part is not described."""
    (tmp_path / "big-00001-of-00002.gguf").write_bytes(W1)
    code, out, err = add(capsys, str(tmp_path / "big-00001-of-00002.gguf"))
    assert (code, out) == (1, "")
    assert "big-00002-of-00002.gguf is missing" in err


def test_add_mlx_directory(tmp_path, capsys):
    """A directory: weights as shards, tokenizer and template recognised, the rest ignored."""
    d = tmp_path / "Qwen-0.5B-4bit"
    d.mkdir()
    (d / "model-00001-of-00002.safetensors").write_bytes(W1)
    (d / "model-00002-of-00002.safetensors").write_bytes(W2)
    (d / "config.json").write_text(json.dumps({"quantization": {"bits": 4, "group_size": 64}}))
    (d / "tokenizer.json").write_text("{}")
    (d / "tokenizer_config.json").write_text("{}")
    (d / "chat_template.jinja").write_text("{{ messages }}")
    (d / "README.md").write_text("hi")
    (d / ".cache").mkdir()
    (d / ".cache" / "junk.safetensors").write_bytes(b"x")
    code, out, _ = add(capsys, str(d))
    assert code == 0
    model = loaded_model(out)
    assert model.name == "Qwen-0.5B-4bit"
    assert model.format is ModelFormat.MLX
    assert [s.path for s in model.shards] == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert model.tokenizer.path == "tokenizer.json" and model.tokenizer.sha256 == digest(b"{}")
    assert model.template.path == "chat_template.jinja"
    assert Verifier(MemoryStampStore()).verify(model).state is ModelState.VERIFIED


def test_add_hf_cache_snapshot(tmp_path, capsys):
    """An HF snapshot (files linking into ../../blobs) is described in place, with its source."""
    repo = tmp_path / "hub" / "models--org--tiny-model"
    (repo / "blobs").mkdir(parents=True)
    rev = "a" * 40
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    for name, data in (("model.safetensors", W1), ("tokenizer.json", b"{}")):
        (repo / "blobs" / digest(data)).write_bytes(data)
        os.symlink(f"../../blobs/{digest(data)}", snap / name)
    code, out, err = add(capsys, str(snap))
    assert code == 0, err
    model = loaded_model(out)
    assert model.name == "tiny-model"
    assert (model.source.hf_repo, model.source.hf_revision) == ("org/tiny-model", rev)
    assert model.format is ModelFormat.SAFETENSORS
    assert Verifier(MemoryStampStore()).verify(model).state is ModelState.VERIFIED


def test_add_refuses_a_file_that_escapes_the_directory(tmp_path, capsys):
    """A weight that is a symlink out of the directory is not described."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "a-00001-of-00002.gguf").write_bytes(W1)
    os.symlink("/etc/passwd", d / "a-00002-of-00002.gguf")
    code, out, err = add(capsys, str(d))
    assert (code, out) == (1, "")
    assert "a-00002-of-00002.gguf resolves outside the model root" in err


# ---------------------------------------------------------------- a directory of GGUF files


def gguf_dir(root: Path, *names: str) -> Path:
    root.mkdir()
    for i, n in enumerate(names):
        (root / n).write_bytes(bytes([65 + i]) * (1000 + i))
    return root


def test_add_gguf_directory_with_one_file(tmp_path, capsys):
    """A directory holding one GGUF (and other files) describes that file, named after the directory."""
    d = gguf_dir(tmp_path / "qwen", "qwen-q4_k_m.gguf", "README.md")
    code, out, err = add(capsys, str(d))
    assert code == 0, err
    model = loaded_model(out)
    assert (model.name, [s.path for s in model.shards]) == ("qwen", ["qwen-q4_k_m.gguf"])


def test_add_gguf_directory_with_a_complete_split_set(tmp_path, capsys):
    """One complete split set is one model: every part, in order."""
    d = gguf_dir(tmp_path / "big", "big-00002-of-00003.gguf", "big-00001-of-00003.gguf",
                 "big-00003-of-00003.gguf")
    code, out, err = add(capsys, str(d))
    assert code == 0, err
    assert [s.path for s in loaded_model(out).shards] == [
        "big-00001-of-00003.gguf", "big-00002-of-00003.gguf", "big-00003-of-00003.gguf"]


def test_add_gguf_directory_with_an_incomplete_split_set(tmp_path, capsys, hashed):
    """A split set with a part missing is refused before hashing, naming the missing part."""
    d = gguf_dir(tmp_path / "big", "big-00001-of-00003.gguf", "big-00003-of-00003.gguf")
    code, out, err = add(capsys, str(d))
    assert (code, out, hashed) == (1, "", [])
    assert "incomplete" in err and "big-00002-of-00003.gguf" in err


def test_add_gguf_directory_with_several_quantisations(tmp_path, capsys, hashed):
    """Several models (and a projector) are refused: the candidates are listed, and the command."""
    d = gguf_dir(tmp_path / "qwen", "mmproj-qwen-f16.gguf", "qwen-q4_k_m.gguf", "qwen-q8_0.gguf")
    code, out, err = add(capsys, str(d))
    assert (code, out, hashed) == (1, "", [])
    lines = err.splitlines()
    assert lines[0].startswith(f"reconcile: error: {d} holds 2 GGUF models and 1 projector")
    assert lines[1:4] == ["  qwen-q4_k_m.gguf", "  qwen-q8_0.gguf",
                          "  mmproj-qwen-f16.gguf  (multimodal projector, not a model)"]
    assert lines[4] == f"pass the model's file, e.g. `reconcile models add {d}/qwen-q4_k_m.gguf`"
    code, out, err = add(capsys, str(d / "qwen-q4_k_m.gguf"))
    assert code == 0, err
    assert [s.path for s in loaded_model(out).shards] == ["qwen-q4_k_m.gguf"]


def test_add_gguf_directory_with_a_projector_beside_one_model(tmp_path, capsys, hashed):
    """A projector beside the model is not silently dropped: the user is asked for the model file."""
    d = gguf_dir(tmp_path / "vl", "mmproj-vl-f16.gguf", "vl-q4_k_m.gguf")
    code, out, err = add(capsys, str(d))
    assert (code, out, hashed) == (1, "", [])
    assert f"{d} holds 1 GGUF model and 1 projector" in err
    assert f"reconcile models add {d}/vl-q4_k_m.gguf" in err


def test_add_gguf_directory_with_split_sets_of_two_quantisations(tmp_path, capsys):
    """Two split sets are two models: each is listed once, by its first part."""
    d = gguf_dir(tmp_path / "big", "big-q4-00001-of-00002.gguf", "big-q4-00002-of-00002.gguf",
                 "big-q8-00001-of-00002.gguf", "big-q8-00002-of-00002.gguf")
    code, _, err = add(capsys, str(d))
    assert code == 1
    assert err.splitlines()[1:3] == ["  big-q4-00001-of-00002.gguf  (split: 2 of 2 parts)",
                                     "  big-q8-00001-of-00002.gguf  (split: 2 of 2 parts)"]
    code, out, err = add(capsys, str(d / "big-q8-00002-of-00002.gguf"))
    assert code == 0, err
    assert [s.path for s in loaded_model(out).shards] == [
        "big-q8-00001-of-00002.gguf", "big-q8-00002-of-00002.gguf"]


def test_add_does_not_block_on_a_fifo(tmp_path, capsys):
    """A FIFO named like a weight is refused, not opened."""
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "a.gguf")
    result: list = []
    t = threading.Thread(target=lambda: result.append(main(["models", "add", str(d)])), daemon=True)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive(), "models add blocked on a FIFO"
    assert result == [1]
    assert "a.gguf is not a regular file" in capsys.readouterr().err


def test_add_ambiguous_format_asks_for_format(tmp_path, capsys):
    """GGUF beside safetensors needs --format, which then picks the weights."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.gguf").write_bytes(W1)
    (d / "b.safetensors").write_bytes(W2)
    code, _, err = add(capsys, str(d))
    assert code == 1 and "--format" in err
    code, out, _ = add(capsys, str(d), "--format", "gguf")
    assert code == 0
    assert [s.path for s in loaded_model(out).shards] == ["a.gguf"]


@pytest.mark.parametrize("argv, message", [
    (["nope"], "No such file or directory"),
    ([], "give a PATH"),
    (["x", "--ollama", "a:b"], "not both"),
    (["x", "--format", "ollama"], "--ollama NAME:TAG"),
])
def test_add_usage_errors(tmp_path, capsys, monkeypatch, argv, message):
    """Bad invocations exit 1 with one line saying why."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    code, out, err = add(capsys, *argv)
    assert (code, out) == (1, "")
    assert message in err


def test_add_bad_name_is_refused_before_hashing(tmp_path, capsys, monkeypatch):
    """A --name that is not a plain token fails before a byte is read."""
    from reconciler.models import modelstore

    (tmp_path / "a.gguf").write_bytes(W1)
    monkeypatch.setattr(modelstore, "hash_file", lambda *a, **k: pytest.fail("hashed"))
    code, _, err = add(capsys, str(tmp_path / "a.gguf"), "--name", "bad/name")
    assert code == 1 and "not a plain token" in err


def test_add_output_file(tmp_path, capsys):
    """-o writes the document (schema path relative to it) and prints nothing on stdout."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.gguf").write_bytes(W1)
    out_file = tmp_path / "manifests" / "m.yaml"
    out_file.parent.mkdir()
    code, out, _ = add(capsys, str(d), "-o", str(out_file))
    assert (code, out) == (0, "")
    text = out_file.read_text()
    schema_ref = text.splitlines()[0].split("$schema=", 1)[1]
    assert (out_file.parent / schema_ref).resolve().name == "model.schema.json"
    assert loaded_model(text).name == "m"


# ---------------------------------------------------------------- ollama


def fake_ollama_store(models: Path, name: str, tag: str, blob: bytes) -> Path:
    """Ollama's on-disk layout: a manifest naming a model layer, and the blob."""
    (models / "blobs").mkdir(parents=True)
    blob_path = models / "blobs" / f"sha256-{digest(blob)}"
    blob_path.write_bytes(blob)
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "0" * 64, "size": 10},
        "layers": [{"mediaType": "application/vnd.ollama.image.model",
                    "digest": f"sha256:{digest(blob)}", "size": len(blob)}],
    }))
    return blob_path


def test_add_ollama_tag(tmp_path, capsys, monkeypatch):
    """--ollama reads Ollama's own store (no server) and writes format ollama with the tag."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    fake_ollama_store(tmp_path / "ollama", "llama3.2", "3b", W1)
    code, out, err = add(capsys, "--ollama", "llama3.2:3b")
    assert code == 0, err
    model = loaded_model(out)
    assert (model.name, model.format, model.ollama_tag) == ("llama3.2:3b", ModelFormat.OLLAMA, "llama3.2:3b")
    assert yaml.safe_load(out)["spec"] == {"format": "ollama", "source": {"ollama_tag": "llama3.2:3b"}}


def test_add_ollama_default_tag_and_home(tmp_path, capsys, monkeypatch):
    """Without OLLAMA_MODELS the store is ~/.ollama/models; the tag defaults to latest."""
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    fake_ollama_store(tmp_path / ".ollama" / "models", "qwen", "latest", W1)
    code, out, _ = add(capsys, "--ollama", "qwen", "--name", "q")
    assert code == 0
    assert yaml.safe_load(out)["spec"]["source"]["ollama_tag"] == "qwen:latest"


def test_add_ollama_missing_tag(tmp_path, capsys, monkeypatch):
    """A tag Ollama has not pulled is an error that says so."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    fake_ollama_store(tmp_path / "ollama", "llama3.2", "3b", W1)
    code, _, err = add(capsys, "--ollama", "llama3.2:1b")
    assert code == 1 and "Ollama has no llama3.2:1b" in err


def test_add_ollama_corrupt_blob(tmp_path, capsys, monkeypatch):
    """A blob that does not hash to its name is refused."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    blob = fake_ollama_store(tmp_path / "ollama", "llama3.2", "3b", W1)
    blob.write_bytes(b"9" * len(W1))
    code, _, err = add(capsys, "--ollama", "llama3.2:3b")
    assert code == 1 and "does not hash to its name" in err


def test_add_ollama_name_cannot_escape_the_store(tmp_path, capsys, monkeypatch):
    """A crafted name is refused before any path is built from it."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    code, _, err = add(capsys, "--ollama", "../../../etc/passwd")
    assert code == 1 and "not an Ollama name" in err


# ---------------------------------------------------------------- verify


@pytest.fixture
def world(tmp_path, capsys):
    """A manifests dir with two models written by `models add`, and a state dir."""
    for name, data in (("alpha", W1), ("beta", W2)):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / f"{name}.gguf").write_bytes(data)
    (tmp_path / "manifests").mkdir()
    for name in ("alpha", "beta"):
        assert main(["models", "add", str(tmp_path / "models" / name),
                     "-o", str(tmp_path / "manifests" / f"{name}.yaml")]) == 0
    capsys.readouterr()
    return tmp_path


def verify(capsys, world: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["models", "verify", "-f", str(world / "manifests"),
                 "--state-dir", str(world / "state"), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_table(world, capsys):
    """Every model is listed with its format, files, size and state; exit 0 when all verify."""
    code, out, _ = verify(capsys, world)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["MODEL", "FORMAT", "FILES", "SIZE", "STATE", "DETAIL"]
    assert lines[1].split() == ["alpha", "gguf", "1", "3.0", "kB", "verified"]
    assert lines[2].split()[0] == "beta"


def test_verify_mismatch_is_sticky_across_runs_until_full(world, capsys):
    """A tampered shard fails; after repair a plain verify still refuses; --full clears it."""
    shard = world / "models" / "alpha" / "alpha.gguf"
    shard.write_bytes(b"x" * len(W1))
    code, out, _ = verify(capsys, world, "alpha")
    assert code == 1 and "model alpha: shard alpha.gguf hash mismatch" in out
    shard.write_bytes(W1)
    code, out, err = verify(capsys, world, "alpha")
    assert code == 1 and "mismatch" in out and "--full" in err
    assert verify(capsys, world, "--full", "alpha")[0] == 0
    assert verify(capsys, world, "alpha")[0] == 0


def test_verify_json_and_detached(world, capsys):
    """--json gives one row per model; a vanished root is detached, and exits 1."""
    (world / "models" / "beta" / "beta.gguf").rename(world / "beta.gguf")
    (world / "models" / "beta").rmdir()
    code, out, _ = verify(capsys, world, "--json")
    assert code == 1
    rows = {r["model"]: r for r in json.loads(out)["models"]}
    assert rows["alpha"]["state"] == "verified"
    assert rows["beta"]["state"] == "detached"
    assert rows["beta"]["detail"].startswith("model store is detached")


def test_verify_unknown_name(world, capsys):
    """Naming a model the manifests do not have is an error."""
    code, _, err = verify(capsys, world, "gamma")
    assert code == 1 and "no model 'gamma'" in err
