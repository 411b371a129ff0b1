"""The shell side of every exit saying why: our children's status, the log, a --once run's end."""

from __future__ import annotations

import os
import subprocess
import time

import attrs

from reconciler.world import postmortem, procs
from reconciler.system import programs
from reconciler.engine import recording
from reconciler.core.desired import Mode, Runtime
from reconciler.core.observed import ExitInfo, RoleRecord
from reconciler.core.observed import ServerProcess, flat_record
from reconciler.state.store import Store


def _child(tmp_path, script: str) -> tuple[int, float]:
    """A child of this process in ``tmp_path/chat-1``, its output in server.log there."""
    where = tmp_path / "chat-1"
    where.mkdir()
    fd = os.open(where / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        started = programs.start(["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"},
                                 cwd=str(where), output=fd)
    finally:
        os.close(fd)
    assert started.pid
    created = None
    deadline = time.monotonic() + 5
    while created is None and time.monotonic() < deadline:
        created = procs.create_time(started.pid)
    return started.pid, created or time.time()


def _ended(pid: int) -> None:
    deadline = time.monotonic() + 10
    while programs.exit_status(pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_child_that_exits_gives_its_code_and_its_log(tmp_path):
    """Our child: exit code known; the log's lines since the last run mark."""
    pid, created = _child(tmp_path, "echo '--- reconciler: earlier run ---'; "
                                    "echo 'error: cannot open model'; exit 3")
    _ended(pid)
    info = postmortem.gather(pid, created, str(tmp_path / "chat-1"))
    assert info == ExitInfo(known=True, code=3, log=("error: cannot open model",))


def test_a_killed_child_gives_its_signal(tmp_path):
    """SIGKILL: known, signal 9; no OOM line unless the kernel wrote one about this pid."""
    pid, created = _child(tmp_path, "echo listening; exec sleep 60")
    time.sleep(0.2)
    os.kill(pid, 9)
    _ended(pid)
    info = postmortem.gather(pid, created, str(tmp_path / "chat-1"))
    assert info.known and info.signal == 9 and info.code is None
    assert info.log == ("listening",) and info.oom == ""


def test_a_stranger_pid_is_unknown_not_guessed(tmp_path):
    """Not our child (an earlier run's server): no status; the log still read."""
    (tmp_path / "chat-1").mkdir()
    (tmp_path / "chat-1" / "server.log").write_text("boom\n")
    info = postmortem.gather(1, procs.create_time(1), str(tmp_path / "chat-1"))
    assert info.known is False and info.code is None and info.log == ("boom",)


def test_a_once_run_records_its_own_children_that_already_ended(tmp_path):
    """recording.ended: a server spawned in this run and already dead gets its exit recorded."""
    pid, created = _child(tmp_path, "echo 'E fatal: bad flag'; exit 2")
    _ended(pid)
    record = flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                        mode=Mode.MANAGED, port=8090, pid=pid, create_time=created,
                        started_at=created)
    with Store(tmp_path / "state") as store:
        store.put_role(record)
        store.put_role(attrs.evolve(
            record, name="other", instance_id="other-1",
            process=ServerProcess(pid=os.getpid(), create_time=procs.create_time(os.getpid()))))
        recording.ended(store, str(tmp_path), 500.0)
        after = store.role("chat")
        assert after.exit == ExitInfo(known=True, code=2, log=("E fatal: bad flag",))
        assert after.exited_at == 500.0
        assert store.role("other").exit is None  # alive (and not our child): left alone


def test_a_pass_that_records_nothing_says_not_recorded_yet_for_a_stranger(tmp_path):
    """§4 `status` and `plan` are never a server's parent, and the reconciler that is (a
    running watch) may not have recorded the exit yet: not ours to know → "not recorded
    yet"; a pass that records says unknown; our own child's code is said by both."""
    proc = subprocess.Popen(["/bin/sh", "-c", "exit 2"])  # a child, but not programs'
    proc.wait()
    assert postmortem.gather(proc.pid, time.time(), None, records=False) == ExitInfo(pending=True)
    assert postmortem.gather(proc.pid, time.time(), None) == ExitInfo()
    pid, created = _child(tmp_path, "exit 6")
    _ended(pid)
    assert postmortem.gather(pid, created, None, records=False) == ExitInfo(known=True, code=6)


def test_our_childs_status_follows_the_create_time_we_noted_not_the_wall_clock(tmp_path):
    """§4 a status goes to the process a record names (pid + create time). The create time
    compared is the one noted at the start: a wall clock stepped since (a resumed VM moves
    the boot time, so every create time) still finds our own child's code (it once said
    ``exit status unknown`` now and then); any other create time gets nothing."""
    pid, _ = _child(tmp_path, "exit 4")
    stepped = time.time() - 3600.0  # as a create time read after the clock was stepped
    programs.note_create_time(pid, stepped)
    _ended(pid)
    assert programs.exit_status(pid, stepped) == 4
    assert programs.exit_status(pid, stepped + 0.5) is None  # another process at that pid
    assert programs.exit_status(pid, time.time()) is None


def test_without_a_noted_create_time_the_start_window_decides(tmp_path):
    """§4 where no create time was noted (it could not be read), one inside our start's
    wall-clock window (a second early, as boot-time truncation makes it) is ours; one
    from long before is an earlier holder of the pid, which gets no status."""
    where = tmp_path / "w"
    where.mkdir()
    fd = os.open(where / "server.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        started = programs.start(["/bin/sh", "-c", "exit 5"], env={}, cwd=str(where),
                                 output=fd)
    finally:
        os.close(fd)
    _ended(started.pid)
    assert programs.exit_status(started.pid, time.time() - 1.0) == 5
    assert programs.exit_status(started.pid, time.time() - 60.0) is None
