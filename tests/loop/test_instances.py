"""Instance directories: a forgotten role's goes, nothing outside data_root ever does."""

from __future__ import annotations

import pytest

from reconciler import instances


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
