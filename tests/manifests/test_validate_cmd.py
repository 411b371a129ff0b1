"""``reconcile validate``: output format, exit codes, --json, and no tracebacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconciler.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
INVALID = Path(__file__).parent / "invalid"


def test_valid_set_prints_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """A valid set exits 0 and prints one summary line."""
    assert main(["validate", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert out == "13 documents: 5 Model, 5 InferenceSpec, 1 NodeConfig, 2 Program\n"


def test_default_path_is_the_manifests_option(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without PATH, validate reads the -f/--manifests directory."""
    shutil.copytree(EXAMPLES, tmp_path / "m")
    assert main(["-f", str(tmp_path / "m"), "validate"]) == 0
    assert main(["validate", "-f", str(tmp_path / "nope")]) == 1
    assert "no such file or directory" in capsys.readouterr().out


def test_problems_are_sorted_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every problem prints as FILE:LINE: $.path: message, sorted; exit 1."""
    for name in ("unknown_keys.yaml", "extra_args_smuggling.yaml"):
        shutil.copy(INVALID / name, tmp_path / name)
    assert main(["validate", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines == sorted(lines, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))
    assert len(lines) == 14
    assert all(line.startswith(str(tmp_path)) and ": $" in line for line in lines)
    assert captured.err.strip() == "14 problems"


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints a list of {file, line, path, message}; [] when valid."""
    assert main(["validate", "--json", str(INVALID / "unknown_model.yaml")]) == 1
    problems = json.loads(capsys.readouterr().out)
    assert problems == [{"file": str(INVALID / "unknown_model.yaml"), "line": 4,
                         "path": "$.spec.model", "message": "no Model named 'nosuch'"}]
    assert main(["validate", "--json", str(EXAMPLES)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_warnings_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Warnings (no allowed_ports) do not fail validation and go to stderr."""
    (tmp_path / "r.yaml").write_text(
        "apiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {name: a}\n"
        "spec: {runtime: llamacpp, mode: adopted, serve: {port: 8080}}\n")
    assert main(["validate", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "1 document: 1 InferenceSpec\n"
    assert "warning: no allowed_ports" in captured.err


@pytest.mark.parametrize("data", [b"\x00\x01\x02", b"\xff" * 10, b"[" * 100000, b"- - -",
                                  b"a: *nope", b"%YAML 9.9\n---\na: 1", b"!!python/name:os.system"])
def test_garbage_never_tracebacks(tmp_path: Path, data: bytes,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Garbage input gives problems and exit 1, never an exception."""
    (tmp_path / "g.yaml").write_bytes(data)
    assert main(["validate", str(tmp_path)]) == 1
    assert "g.yaml:" in capsys.readouterr().out


def test_empty_directory_is_valid_but_warned(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A directory without manifests validates (0 documents) with a warning on stderr."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text("a: 1\n")
    assert main(["validate", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "0 documents\n"
    assert "no manifest documents" in captured.err
