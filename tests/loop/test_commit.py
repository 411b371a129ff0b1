"""The manifests' git commit recorded with every pass (reconciler.loop.manifests_commit)."""

from __future__ import annotations

import subprocess

from reconciler.loop import manifests_commit
from reconciler.units import parse_duration


def git(cwd, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_commit_is_recorded_and_a_dirty_tree_says_so(tmp_path):
    """A clean checkout gives HEAD; an uncommitted edit gives HEAD+dirty; no repo gives None."""
    assert manifests_commit([str(tmp_path)]) is None
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "chat.yaml").write_text("a: 1\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert manifests_commit([str(tmp_path)]) == head
    (tmp_path / "chat.yaml").write_text("a: 2\n")
    assert manifests_commit([str(tmp_path)]) == f"{head}+dirty"


def test_days_are_a_duration_unit():
    """`events --since 1d` works: durations accept days."""
    assert parse_duration("1d") == 86400.0 and parse_duration("1d12h") == 129600.0
