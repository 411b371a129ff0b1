"""The manifests' git commit recorded with every pass (reconciler.gitcommit)."""

from __future__ import annotations

import os
import subprocess

from reconciler.repo.gitcommit import manifests_commit
from reconciler.core.units import parse_duration


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
    sub = tmp_path / "manifests"
    sub.mkdir()
    (sub / "chat.yaml").write_text("a: 3\n")
    assert manifests_commit([str(sub / "chat.yaml")]).startswith(head)  # found from below


def test_git_is_not_run_outside_a_checkout(tmp_path, monkeypatch):
    """No .git in the folder or above: no git process at all; with one, git is asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 128\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    plain = tmp_path / "plain" / "manifests"
    plain.mkdir(parents=True)
    assert manifests_commit([str(plain)]) is None
    assert not calls.exists()
    (tmp_path / "plain" / ".git").mkdir()
    assert manifests_commit([str(plain)]) is None  # git answered 128: not a commit
    assert "rev-parse HEAD" in calls.read_text()


def test_days_are_a_duration_unit():
    """`events --since 1d` works: durations accept days."""
    assert parse_duration("1d") == 86400.0 and parse_duration("1d12h") == 129600.0
