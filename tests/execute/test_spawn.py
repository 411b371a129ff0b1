"""spawn(): the child's environment, privileges, session, limits and log (BEHAVIOUR §6)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs
import pytest

from reconciler.system import programs
from reconciler.world import serverlog, spawn
from reconciler.core.ownership import MARKER_ENV

from .conftest import NOBODY, alive, wait_for

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if item)


def test_child_gets_exactly_the_launch_environment(world, monkeypatch):
    """The child's environment is launch.env and nothing else: none of ours leaks in."""
    monkeypatch.setenv("RECONCILER_TEST_LEAK", "should-not-appear")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "FOO": "bar baz", MARKER_ENV: "r-1"}
    launch = world.launch(SLEEPER, env=env)
    result = world.spawn(launch)
    assert result.ok, result.error
    assert _environ(result.pid) == env


def test_child_runs_in_its_own_session_with_cwd_and_devnull_stdin(world):
    """The child leads its own session and group, runs in launch.cwd, reads /dev/null."""
    launch = world.launch(SLEEPER)
    result = world.spawn(launch)
    assert result.ok, result.error
    assert os.getsid(result.pid) == result.pid
    assert os.getpgid(result.pid) == result.pid
    assert os.readlink(f"/proc/{result.pid}/cwd") == launch.cwd
    assert os.readlink(f"/proc/{result.pid}/fd/0") == "/dev/null"
    assert result.create_time is not None and result.create_time > 0


def test_core_dumps_are_off(world):
    """RLIMIT_CORE is 0 (soft and hard) in the child."""
    result = world.spawn(world.launch(SLEEPER))
    assert result.ok, result.error
    limits = Path(f"/proc/{result.pid}/limits").read_text().splitlines()
    core = next(line for line in limits if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"]


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_run_as_drops_groups_then_gid_then_uid(world):
    """With run_as the child has that uid and gid (real, effective, saved) and no extra groups."""
    launch = world.launch(SLEEPER)
    assert launch.run_as == NOBODY
    result = world.spawn(launch)
    assert result.ok, result.error
    status = _status(result.pid)
    assert status["Uid"].split() == ["65534"] * 4
    assert status["Gid"].split() == ["65534"] * 4
    assert status["Groups"] == ""
    st = os.stat(launch.cwd)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o750)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root refusal needs root")
def test_root_without_run_as_is_refused(world):
    """As root, a launch without run_as is refused and nothing starts."""
    launch = attrs.evolve(world.launch(SLEEPER), run_as=None)
    result = world.spawn(launch)
    assert not result.ok and result.pid is None
    assert result.error == "refusing to run a managed server as root without run_as"
    assert not os.path.exists(launch.cwd)


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_program_writable_by_group_or_others_is_refused(world, mode):
    """A serve program writable by group or others is never run."""
    program = world.root / "server"
    program.write_text("#!/bin/sh\nexec sleep 60\n")
    program.chmod(mode)
    result = world.spawn(world.launch("", program=str(program)))
    assert not result.ok and result.pid is None
    assert "writable by group or others" in result.error


@pytest.mark.parametrize("program,fragment", [
    ("python3", "not an absolute path"),
    ("/nonexistent/llama-server", "No such file"),
    ("{root}/plain-file", "not executable"),
    ("/usr/bin", "not a regular file"),
])
def test_program_must_be_configured_not_guessed(world, program, fragment):
    """The program must be an absolute path to an existing executable regular file."""
    plain = world.root / "plain-file"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    result = world.spawn(world.launch("", program=program.format(root=world.root)))
    assert not result.ok and fragment in result.error


def test_stdout_and_stderr_go_to_server_log(world):
    """Both output streams are appended to <cwd>/server.log."""
    launch = world.launch(
        "import sys, time; print('to-stdout', flush=True); "
        "print('to-stderr', file=sys.stderr, flush=True); time.sleep(60)"
    )
    result = world.spawn(launch)
    assert result.ok, result.error
    log = Path(launch.cwd) / "server.log"
    assert wait_for(lambda: "to-stderr" in log.read_text())
    assert "to-stdout" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o640


def test_oversized_log_is_rotated_at_spawn(world):
    """An old server.log over the cap becomes server.log.1; the new server starts a fresh one."""
    launch = world.launch("print('new-run', flush=True)")
    cwd = Path(launch.cwd)
    cwd.mkdir(parents=True)
    (cwd / "server.log").write_text("old-run\n" * 100)
    (cwd / "server.log.1").write_text("older\n")
    result = world.spawn(launch, log_max_bytes=100, log_backups=3)
    assert result.ok, result.error
    assert wait_for(lambda: "new-run" in (cwd / "server.log").read_text())
    assert "old-run" not in (cwd / "server.log").read_text()
    assert (cwd / "server.log.1").read_text().startswith("old-run")
    assert (cwd / "server.log.2").read_text() == "older\n"


def test_small_log_is_appended_not_rotated(world):
    """A server.log under the cap is kept and appended to."""
    launch = world.launch("print('second', flush=True)")
    cwd = Path(launch.cwd)
    cwd.mkdir(parents=True)
    (cwd / "server.log").write_text("first\n")
    assert world.spawn(launch, log_max_bytes=1000).ok
    assert wait_for(lambda: "second" in (cwd / "server.log").read_text())
    assert (cwd / "server.log").read_text().startswith("first\n")
    assert not (cwd / "server.log.1").exists()


def test_running_log_is_capped_by_copy_and_truncate(world):
    """rotate_log_if_needed copies a big live log to .1 and the child keeps writing at offset 0."""
    launch = world.launch(
        "import sys, time\n"
        "print('x' * 5000, flush=True)\n"
        "open('wrote-big', 'w').close()\n"
        "while not __import__('os').path.exists('go'): time.sleep(0.01)\n"
        "print('after-rotation', flush=True)\n"
        "time.sleep(60)\n"
    )
    result = world.spawn(launch)
    assert result.ok, result.error
    cwd = Path(launch.cwd)
    assert wait_for(lambda: (cwd / "wrote-big").exists())
    assert serverlog.rotate_if_needed(launch.cwd, max_bytes=10_000) == serverlog.RotateResult(rotated=False)
    assert serverlog.rotate_if_needed(launch.cwd, max_bytes=1000, backups=2) == serverlog.RotateResult(
        rotated=True)
    assert (cwd / "server.log").stat().st_size == 0
    assert (cwd / "server.log.1").read_text() == "x" * 5000 + "\n"
    (cwd / "go").touch()
    assert wait_for(lambda: "after-rotation" in (cwd / "server.log").read_text())
    assert (cwd / "server.log").read_text() == "after-rotation\n"  # no hole of NULs before it


def test_symlinked_log_is_refused_and_its_target_untouched(world):
    """A server.log planted as a symlink is not followed (the dir belongs to the server user)."""
    launch = world.launch(SLEEPER)
    cwd = Path(launch.cwd)
    cwd.mkdir(parents=True)
    target = world.root / "precious"
    target.write_text("keep me\n")
    (cwd / "server.log").symlink_to(target)
    result = world.spawn(launch)
    assert not result.ok and result.pid is None
    assert target.read_text() == "keep me\n"
    rotated = serverlog.rotate_if_needed(launch.cwd, max_bytes=0)
    assert not rotated.rotated and rotated.error
    assert target.read_text() == "keep me\n"


def test_reap_collects_exited_children(world):
    """reap() leaves no zombie behind and reports the exit code."""
    result = world.spawn(world.launch("raise SystemExit(7)"))
    assert result.ok, result.error
    codes: dict[int, int] = {}
    assert wait_for(lambda: codes.update(programs.reap()) or result.pid in codes)
    assert codes[result.pid] == 7
    assert not programs.is_child(result.pid)
    assert not alive(result.pid)

