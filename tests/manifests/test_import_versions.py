"""§1.7 + §1.4: `reconcile import --program-version` writes the spellings of the build the
lines run, and pins that build's binary as a Program of that version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from reconciler.commands import importer
from reconciler.manifests import translate

OLD_LINE = ["llama-server", "-m", "m.gguf", "--no-mmap", "--mlock", "-t", "2"]


ROOT = Path(__file__).resolve().parents[2]


def _reconcile(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line of this tree's reconciler (not another one installed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_line_is_read_with_its_builds_table_and_keeps_its_spellings():
    """§1.7: read for b10068 (`--program-version`), --no-mmap --mlock are that build's own
    flags and stay as written; read for the default (b11434) they become --load-mode mlock;
    --draft-max/--draft-min stay for b5361 and become --spec-draft-n-* for b11434."""
    kept = translate.translate(OLD_LINE, lookup=importer._lookup("b10068"))
    assert kept.expressed, kept.lost
    assert kept.serve["extra_args"] == ["--no-mmap", "--mlock", "-t", "2"]
    assert not [n for n in kept.notes if n.changed]
    modern = translate.translate(OLD_LINE, lookup=importer._lookup(None))
    assert modern.serve["extra_args"] == ["-t", "2", "--load-mode", "mlock"]
    draft = ["llama-server", "-m", "m.gguf", "--draft-max", "16", "--draft-min", "4"]
    assert translate.translate(draft, lookup=importer._lookup("b5361")).serve["extra_args"] \
        == ["--draft-max", "16", "--draft-min", "4"]
    assert translate.translate(draft).serve["extra_args"] == [
        "--spec-draft-n-max", "16", "--spec-draft-n-min", "4"]


def _fake_server(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "llama-server"
    exe.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(exe, 0o755)
    return exe


def test_import_pins_the_binary_as_a_program_of_that_version_and_validates(tmp_path):
    """§1.7 `import cmd --program-version b10068 -- /path/llama-server …`: a Program
    llama-b10068 of that binary (hashed in place), the NodeConfig naming it, the role with
    the build's own spellings; valid (exit 0) because b10068's table judges it."""
    exe = _fake_server(tmp_path)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1020))
    out = tmp_path / "out"
    done = _reconcile("import", "cmd", "-o", str(out), "--program-version", "b10068", "--",
                      str(exe), "-m", str(gguf), "--no-mmap", "--port", "8090", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    program = yaml.safe_load((out / "llama-b10068.yaml").read_text())
    assert program["kind"] == "Program" and program["spec"]["version"] == "b10068"
    assert program["spec"]["root"] == str(exe.parent)
    node = yaml.safe_load((out / "node.yaml").read_text())
    assert node["spec"]["serve_programs"] == {"llamacpp": "llama-b10068"}
    role = yaml.safe_load((out / "m.yaml").read_text())
    assert role["spec"]["serve"]["extra_args"] == ["--no-mmap"]
    assert "pinned" in done.stderr and "b10068" in done.stderr


def test_import_for_a_build_not_on_this_machine_says_how_to_pin_it(tmp_path):
    """§1.7: the binary is not here: no Program is invented; a `to finish:` step names the
    `programs add` to run, and the result is not valid yet (the path is judged as b11434,
    which refuses --no-mmap, naming the build)."""
    out = tmp_path / "out"
    done = _reconcile("import", "cmd", "-o", str(out), "--program-version", "b10068", "--",
                      "/nowhere/llama-server", "-m", "/nowhere/m.gguf", "--no-mmap",
                      "--port", "8090", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "to finish: pin the llama-server these lines run as b10068: `reconcile programs " \
           "add PATH --version b10068" in done.stderr
    assert not list(out.glob("llama-*.yaml"))
    assert "not a flag of llama-server b11434" in done.stderr


def test_a_program_version_must_be_a_build_number(tmp_path):
    """§1.7: `--program-version latest` is refused before anything is written (exit 1)."""
    done = _reconcile("import", "cmd", "-o", str(tmp_path / "out"), "--program-version",
                      "latest", "--", "llama-server", "-m", "m.gguf", cwd=tmp_path)
    assert done.returncode == 1 and "b<number>" in done.stderr
    assert not (tmp_path / "out").exists()
