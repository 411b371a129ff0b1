"""Instance directories: a forgotten role's goes, nothing outside data_root ever does."""

from __future__ import annotations

import pytest

from reconciler.world import instances


def test_a_forgotten_roles_directory_is_removed(tmp_path):
    """remove_dir deletes <root>/<instance id> and what is in it."""
    (tmp_path / "chat-0123abcd").mkdir()
    (tmp_path / "chat-0123abcd" / "server.log").write_text("x")
    instances.remove_dir(str(tmp_path), "chat-0123abcd")
    assert not (tmp_path / "chat-0123abcd").exists()


@pytest.mark.parametrize("instance_id", ["", ".", "..", "../root", "a/b"])
def test_an_id_that_is_not_one_name_removes_nothing(tmp_path, instance_id):
    """An empty id, '.', '..' or a path never reaches rmtree: the root and its parent stay."""
    root = tmp_path / "instances"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "root").mkdir()
    instances.remove_dir(str(root), instance_id)
    assert (root / "a" / "b").is_dir() and (tmp_path / "root").is_dir()


def test_sweep_removes_only_unwanted_unused_instance_directories(tmp_path):
    """An old instance's directory goes; a wanted one, one in use and a stranger stay."""
    import subprocess

    from reconciler.world import instances

    root = tmp_path / "instances"
    for name in ("chat-0000aaaa", "chat-1111bbbb", "busy-2222cccc", "notes", "x-zzzzzzzz"):
        (root / name).mkdir(parents=True)
    (root / "chat-0000aaaa" / "server.log").write_text("old")
    user = subprocess.Popen(["/bin/sleep", "30"], cwd=root / "busy-2222cccc")
    try:
        gone = instances.sweep(str(root), {"chat-1111bbbb"})
        assert gone == ("chat-0000aaaa",)
        assert sorted(p.name for p in root.iterdir()) == [
            "busy-2222cccc", "chat-1111bbbb", "notes", "x-zzzzzzzz"]
    finally:
        user.kill()
        user.wait()
    assert instances.sweep(str(root), {"chat-1111bbbb"}) == ("busy-2222cccc",)
