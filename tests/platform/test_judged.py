"""Ownership judged on each implementation's facts (``world/procs.py`` over the seam).

§3/§4: the same real process is ours by pid + create time + marker, proves itself
ours by the orphan proof (leader, uid, cwd = ``<root>/<id>``, marker) and is found
by the survey, whichever implementation reads the facts; a recycled pid is not ours.
"""

from __future__ import annotations

import os
import signal

import pytest

from reconciler.platform import choose
from reconciler.world import procs
from tests.platform.conftest import wait_for


@pytest.fixture
def judged(platform, monkeypatch):
    """``procs`` reading its facts from ``platform``."""
    monkeypatch.setattr(choose, "current", lambda: platform)
    return platform


def test_ours_by_record_and_by_proof(judged, spawn, tmp_path):
    """is_owned, proves_ours and find_ours agree on a real marked child; recycled pid: no."""
    child = spawn(marker="chat-0000aaaa")
    root = str(tmp_path)  # it works in <root>/chat-0000aaaa-0: not its marker's directory
    created = procs.create_time(child.pid)
    assert procs.is_owned(child.pid, created, "chat-0000aaaa")
    assert procs.is_running(child.pid, created)
    assert not procs.is_owned(child.pid, created - 100.0, "chat-0000aaaa")
    assert not procs.is_owned(child.pid, created, "other-0000bbbb")
    assert procs.marker_of(child.pid) == "chat-0000aaaa"
    assert not procs.proves_ours(child.pid, created, "chat-0000aaaa", root, os.getuid())
    assert child.pid in procs.group_pids(child.pid)
    assert "chat-0000aaaa-0" in procs.directories_in_use(root)


def test_the_survey_finds_a_proven_orphan(judged, spawn, tmp_path):
    """An unrecorded server in exactly <root>/<id> with marker <id> is found, then gone."""
    child = spawn(marker="chat-0000aaaa")
    (tmp_path / "chat-0000aaaa-0").rename(tmp_path / "chat-0000aaaa")
    root = str(tmp_path)
    created = procs.create_time(child.pid)
    found = [(pid, iid) for pid, _, iid, _, _ in procs.find_ours(root, os.getuid())]
    assert found == [(child.pid, "chat-0000aaaa")]
    assert procs.proves_ours(child.pid, created, "chat-0000aaaa", root, os.getuid())
    assert procs.find_ours(root, os.getuid(), known=lambda pid, ct: pid == child.pid) == []
    os.kill(child.pid, signal.SIGKILL)
    assert wait_for(lambda: not procs.is_running(child.pid, created))
    assert procs.find_ours(root, os.getuid()) == []
