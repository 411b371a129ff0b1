"""Reading manifest paths (SHELL): what is read, what is skipped, what is refused."""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.repo import sources

DOC = b"apiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n}\nspec: {}\n"


def _names(files: list[tuple[str, bytes]]) -> list[str]:
    return [os.path.basename(name) for name, _ in files]


def test_directory_reads_yaml_only_in_order(tmp_path: Path) -> None:
    """Only *.yaml/*.yml directly inside, sorted; hidden files and subdirectories skipped."""
    for name in ("b.yml", "a.yaml", "c.txt", ".hidden.yaml", "README.md"):
        (tmp_path / name).write_bytes(DOC)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.yaml").write_bytes(DOC)
    (tmp_path / "dir.yaml").mkdir()
    files, problems = sources.read_manifests([str(tmp_path)])
    assert problems == []
    assert _names(files) == ["a.yaml", "b.yml"]


def test_named_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    """A file named on the command line is read even without a YAML suffix."""
    (tmp_path / ".x.conf").write_bytes(DOC)
    files, problems = sources.read_manifests([str(tmp_path / ".x.conf")])
    assert problems == [] and files == [(str(tmp_path / ".x.conf"), DOC)]


def test_symlink_leaving_the_directory_is_refused(tmp_path: Path) -> None:
    """A symlink out of the directory is a problem; one inside it is followed."""
    outside = tmp_path / "outside.yaml"
    outside.write_bytes(DOC)
    d = tmp_path / "m"
    (d / "real").mkdir(parents=True)
    (d / "real" / "in.yaml").write_bytes(DOC)
    (d / "escape.yaml").symlink_to(outside)
    (d / "inside.yaml").symlink_to(d / "real" / "in.yaml")
    (d / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    files, problems = sources.read_manifests([str(d)])
    assert _names(files) == ["inside.yaml"]
    assert sorted(os.path.basename(p.file) for p in problems) == ["dangling.yaml", "escape.yaml"]
    assert all(p.line == 0 for p in problems)
    assert any("leads out of" in p.message for p in problems)


def test_big_file_is_refused_before_reading(tmp_path: Path) -> None:
    """A file over 1 MiB is refused from its size (a sparse 1 GiB file reads nothing)."""
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    files, problems = sources.read_manifests([str(tmp_path)])
    assert files == [] and "larger than 1 MiB" in problems[0].message


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named like a manifest is refused, not opened for a blocking read."""
    os.mkfifo(tmp_path / "pipe.yaml")
    files, problems = sources.read_manifests([str(tmp_path)])
    assert files == [] and problems[0].message == "not a regular file"


def test_missing_path_is_a_problem(tmp_path: Path) -> None:
    """A path that does not exist is reported, not raised."""
    files, problems = sources.read_manifests([str(tmp_path / "nope")])
    assert files == [] and problems[0].message == "no such file or directory"


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    """Naming a file and its directory does not load the file twice."""
    (tmp_path / "a.yaml").write_bytes(DOC)
    files, _ = sources.read_manifests([str(tmp_path), str(tmp_path / "a.yaml")])
    assert len(files) == 1


def test_load_desired_merges_read_problems(tmp_path: Path) -> None:
    """A refused file makes the whole set invalid even when the rest loads."""
    (tmp_path / "a.yaml").write_bytes(DOC)
    os.mkfifo(tmp_path / "b.yaml")
    result = sources.load_desired([str(tmp_path)])
    assert result.desired is None and len(result.problems) == 1
