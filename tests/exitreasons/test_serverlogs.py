"""`reconcile logs`: the last lines across rotated files, and following like tail -F."""

from __future__ import annotations

import io
import os

from reconciler.commands import serverlogs
from reconciler.world import logtail


def _lines(first: int, last: int) -> str:
    return "".join(f"line {i}\n" for i in range(first, last + 1))


def test_last_lines_reach_into_the_rotated_files_in_order(tmp_path):
    """-n beyond the live file takes the rest from server.log.1, then .2, oldest first."""
    (tmp_path / "server.log.2").write_text(_lines(1, 3))
    (tmp_path / "server.log.1").write_text(_lines(4, 6))
    (tmp_path / "server.log").write_text(_lines(7, 8))
    got = serverlogs.last_lines(str(tmp_path), 5)
    assert got == [f"line {i}\n".encode() for i in range(4, 9)]
    assert serverlogs.last_lines(str(tmp_path), 0) == []
    assert len(serverlogs.last_lines(str(tmp_path), 100)) == 8


def test_last_lines_end_an_unfinished_last_line(tmp_path):
    """A log whose last line is still being written prints it with a newline."""
    (tmp_path / "server.log").write_text("a\nb")
    assert serverlogs.last_lines(str(tmp_path), 1) == [b"b\n"]


def test_last_lines_never_follow_a_symlink(tmp_path):
    """A server.log that is a symlink (the server's user planted it) is not read."""
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    (tmp_path / "d").mkdir()
    os.symlink(secret, tmp_path / "d" / "server.log")
    assert serverlogs.last_lines(str(tmp_path / "d"), 5) == []


def test_a_long_file_is_read_backwards_to_exactly_n_lines(tmp_path):
    """Far more than one read block: the last N lines, none lost at a block edge."""
    (tmp_path / "server.log").write_text(_lines(1, 30000))
    got = serverlogs.last_lines(str(tmp_path), 10001)
    assert got[0] == b"line 20000\n" and got[-1] == b"line 30000\n" and len(got) == 10001


def _append(path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


class _Steps:
    """``until`` for ``follow``: runs one change to the world per poll, then ends it."""

    def __init__(self, *steps) -> None:
        self.steps = list(steps)

    def __call__(self) -> bool:
        if not self.steps:
            return True
        self.steps.pop(0)()
        return False


def test_follow_prints_appends_a_truncation_and_a_renamed_rotation(tmp_path):
    """Appended lines, then the file truncated in place, then renamed away and recreated."""
    log = tmp_path / "server.log"
    log.write_text("old\n")
    out = io.BytesIO()

    def append(text):
        return lambda: _append(log, text)

    def truncate():
        log.write_text("")

    def rename():
        log.rename(tmp_path / "server.log.1")
        log.write_text("new file\n")

    serverlogs.follow(str(tmp_path), lambda: str(tmp_path), out, poll=0,
                      until=_Steps(append("one\n"), lambda: None, truncate,
                                   append("after truncate\n"), lambda: None,
                                   append("last of old\n"), rename, lambda: None, lambda: None))
    assert out.getvalue() == b"one\nafter truncate\nlast of old\nnew file\n"


def test_follow_moves_to_a_new_instance_directory(tmp_path, monkeypatch):
    """When the store names a new instance (a port edit), its log is followed from its start."""
    old, new = tmp_path / "chat-1", tmp_path / "chat-2"
    old.mkdir()
    new.mkdir()
    (old / "server.log").write_text("old run\n")
    (new / "server.log").write_text("new run\n")
    where = {"now": str(old)}
    monkeypatch.setattr(logtail, "RELOOK", 0.0)
    out = io.BytesIO()
    serverlogs.follow(str(old), lambda: where["now"], out, poll=0,
                      until=_Steps(lambda: where.update(now=str(new)), lambda: None,
                                   lambda: _append(new / "server.log", "more\n"),
                                   lambda: None))
    assert out.getvalue() == b"new run\nmore\n"
