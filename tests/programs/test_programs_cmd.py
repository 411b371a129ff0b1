"""`reconcile programs add PATH` (§14): the binary and its libraries hashed in place."""

from __future__ import annotations

import hashlib

import yaml

from reconciler.cli import main
from reconciler.manifests import loader


def test_add_pins_the_binary_and_the_libraries_beside_it(tmp_path, capsys):
    """§14: the executable and the *.so / *.so.N beside it, by sha256 and size, root the real
    directory (a symlinked PATH followed); other files and libraries linked from elsewhere
    are left out; the document loads without problems."""
    rel = tmp_path / "llama-b1"
    rel.mkdir()
    (rel / "llama-server").write_bytes(b"\x7fELF server")
    (rel / "llama-server").chmod(0o755)
    (rel / "libllama.so").write_bytes(b"lib")
    (rel / "libggml.so.0").write_bytes(b"ggml")
    (rel / "README.md").write_text("not pinned")
    (tmp_path / "elsewhere.so").write_bytes(b"x")
    (rel / "libother.so").symlink_to(tmp_path / "elsewhere.so")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llama-server").symlink_to(rel / "llama-server")
    assert main(["programs", "add", str(tmp_path / "bin" / "llama-server"),
                 "--version", "b1"]) == 0
    text = capsys.readouterr().out
    doc = yaml.safe_load(text)
    assert doc["metadata"] == {"name": "llama-b1"}
    spec = doc["spec"]
    assert (spec["runtime"], spec["version"], spec["root"], spec["entrypoint"]) == (
        "llamacpp", "b1", str(rel), "llama-server")
    assert spec["files"] == [
        {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for p, d in (("libggml.so.0", b"ggml"), ("libllama.so", b"lib"),
                     ("llama-server", b"\x7fELF server"))]
    assert loader.load([("p.yaml", text.encode())]).problems == ()


def test_add_needs_the_version_and_runs_nothing(tmp_path, capsys):
    """§14: the version is the operator's word (nothing is run to find it); exit 1 without."""
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\ntouch ran\n")
    exe.chmod(0o755)
    assert main(["programs", "add", str(exe)]) == 1
    assert "give --version" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()
