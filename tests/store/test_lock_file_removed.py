"""The lock file removed under its holder: never two writers (README, faults of its own world)."""

from __future__ import annotations

import os
import shutil

import pytest

from reconciler.core.errors import LockHeld
from reconciler.state.lock import Lock


def test_a_removed_lock_file_does_not_let_a_second_writer_in(tmp_path):
    """The holder's directory flock keeps a second run out after `rm lock`; check() restores it."""
    holder = Lock(tmp_path)
    holder.acquire()
    try:
        (tmp_path / "lock").unlink()
        second = Lock(tmp_path)
        with pytest.raises(LockHeld):
            second.acquire()
        assert holder.check() == ("", f"the lock file {tmp_path}/lock was removed; re-created it "
                                      f"(pid {os.getpid()})")
        assert holder.holder() == os.getpid()
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            second.acquire()
        assert holder.check() == ("", "")
    finally:
        holder.release()
    taker = Lock(tmp_path)
    taker.acquire()  # released: the next one gets it
    taker.release()


def test_a_removed_state_directory_is_lost_to_its_holder(tmp_path):
    """The directory itself removed (and made again by someone): check() says the lock is lost."""
    state = tmp_path / "state"
    holder = Lock(state)
    holder.acquire()
    try:
        shutil.rmtree(state)
        lost, restored = holder.check()
        assert lost == f"the state directory {state} was removed or replaced under this reconciler"
        assert restored == ""
        state.mkdir()
        assert holder.check()[0] == lost
    finally:
        holder.release()


def test_an_older_reconciler_holding_only_the_file_still_excludes(tmp_path):
    """A holder of the file's flock alone (an older reconciler) keeps a new run out."""
    import fcntl

    fd = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(LockHeld):
            Lock(tmp_path).acquire(timeout=0.1)
    finally:
        os.close(fd)
