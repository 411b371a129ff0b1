"""§3 what ``procs.is_owned`` reads of a recorded pid: pid + create time + marker, alive, not a zombie.

On Linux the platform's process table (``platform/linux.py``) reads /proc itself
(the stat line, the environment, the stat line again) instead of psutil's four
reads; these tests hold it to the same answers as psutil's way (the portable
table), on real processes, and pin the order of its reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Iterator

import psutil
import pytest

from reconciler.core import ownership
from reconciler.core.ownership import MARKER_ENV
from reconciler.platform import choose, linux, portable, procfs
from reconciler.platform.seam import DENIED
from reconciler.world import procs

IID = "chat-0badcafe"

pytestmark = pytest.mark.skipif(not isinstance(choose.current().processes, linux.Processes),
                                reason="not the linux platform: psutil's way is the only one")


def _child(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={"PATH": "/usr/bin:/bin", **env}, start_new_session=True)


@pytest.fixture
def made() -> Iterator[list[subprocess.Popen]]:
    procs_: list[subprocess.Popen] = []
    yield procs_
    for p in procs_:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=5)


def _zombie(made: list[subprocess.Popen]) -> subprocess.Popen:
    """A child of ours that exited and is not reaped yet: a zombie carrying our marker."""
    p = _child({MARKER_ENV: IID})
    made.append(p)
    created = psutil.Process(p.pid).create_time()
    os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    p.zombie_created = created  # type: ignore[attr-defined]
    return p


def _owned(table, pid: int | None, ctime: float | None, iid: str) -> bool:
    seen = table.recorded(pid, ctime, marker=True)
    return seen is not None and seen is not DENIED and ownership.owned(seen, pid, ctime, iid)


def _both(pid: int | None, ctime: float | None, iid: str, monkeypatch) -> tuple[bool, bool]:
    """(the /proc reads' answer, psutil's way's answer) for one question; ``is_owned``
    (this machine's platform) gives the first."""
    fast = procs.is_owned(pid, ctime, iid)
    assert fast == _owned(linux.Processes(), pid, ctime, iid)
    return fast, _owned(portable.Processes(), pid, ctime, iid)


def test_is_owned_answers_as_psutils_way(made, monkeypatch) -> None:
    """§3 pid + create time + marker, alive: the /proc reads and psutil's way agree on
    ours, a foreign marker, no marker, a marker holding '=', a recycled pid (another create
    time), no recorded create time, a pid that is gone, and a zombie."""
    ours, foreign, bare, odd = (_child({MARKER_ENV: IID}), _child({MARKER_ENV: "other-00000000"}),
                                _child({}), _child({MARKER_ENV: f"{IID}=x"}))
    made.extend((ours, foreign, bare, odd))
    time.sleep(0.2)  # each has exec'd (its environment is the child's own)
    ctime = {p.pid: psutil.Process(p.pid).create_time() for p in (ours, foreign, bare, odd)}
    zombie = _zombie(made)
    gone = _child({MARKER_ENV: IID})
    gone_ctime = psutil.Process(gone.pid).create_time()
    gone.kill()
    gone.wait()
    cases = {
        "ours": (ours.pid, ctime[ours.pid], IID, True),
        "ours, a tick off": (ours.pid, ctime[ours.pid] + 0.01, IID, True),
        "another instance's marker": (foreign.pid, ctime[foreign.pid], IID, False),
        "no marker": (bare.pid, ctime[bare.pid], IID, False),
        "a marker with '=' in it": (odd.pid, ctime[odd.pid], f"{IID}=x", True),
        "a recycled pid": (ours.pid, ctime[ours.pid] - 5, IID, False),
        "no recorded create time": (ours.pid, None, IID, False),
        "no pid": (None, ctime[ours.pid], IID, False),
        "a zombie": (zombie.pid, zombie.zombie_created, IID, False),  # type: ignore[attr-defined]
        "gone": (gone.pid, gone_ctime, IID, False),
    }
    for why, (pid, ct, iid, want) in cases.items():
        assert _both(pid, ct, iid, monkeypatch) == (want, want), why


def test_a_recycled_pids_environment_is_never_read(made, monkeypatch) -> None:
    """§3 the create time is checked before the marker is read: a pid now running
    another process (another start) is passed over without reading its environment."""
    p = _child({MARKER_ENV: IID})
    made.append(p)
    time.sleep(0.2)
    ctime = psutil.Process(p.pid).create_time()
    read: list[int] = []
    real = procfs._environ_marker
    monkeypatch.setattr(procfs, "_environ_marker", lambda pid: read.append(pid) or real(pid))
    assert not procs.is_owned(p.pid, ctime - 5, IID)
    assert read == []
    assert procs.is_owned(p.pid, ctime, IID) and read == [p.pid]


def test_the_marker_counts_only_for_the_process_still_at_the_pid(made, monkeypatch) -> None:
    """§3 the stat line is read again after the environment: when the pid's process is no
    longer the one whose start was checked (it exited, its pid was taken), or has become a
    zombie, the marker read meanwhile is not taken as the recorded server's."""
    p = _child({MARKER_ENV: IID})
    made.append(p)
    time.sleep(0.2)
    ctime = psutil.Process(p.pid).create_time()
    real = procfs._stat
    for second in ((b"S", b"1"), (b"Z", None)):
        calls: list[int] = []

        def stat(pid: int, second=second) -> tuple[bytes, bytes]:
            calls.append(pid)
            state, start = real(pid)
            if len(calls) == 1:
                return state, start
            return second[0], second[1] if second[1] is not None else start

        monkeypatch.setattr(procfs, "_stat", stat)
        assert not procs.is_owned(p.pid, ctime, IID), second
        assert len(calls) == 2
    monkeypatch.setattr(procfs, "_stat", real)
    assert procs.is_owned(p.pid, ctime, IID)


def test_the_boot_time_is_read_once_for_a_pass_of_many_processes(made, monkeypatch) -> None:
    """What ``is_owned`` costs: the boot time (psutil reads /proc/stat for every create
    time) is read at most once a second, not once per recorded server."""
    p = _child({MARKER_ENV: IID})
    made.append(p)
    time.sleep(0.2)
    ctime = psutil.Process(p.pid).create_time()
    reads: list[float] = []
    real = procfs._PSUTIL.boot_time
    monkeypatch.setattr(procfs._PSUTIL, "boot_time", lambda: reads.append(1) or real())
    monkeypatch.setattr(procfs, "_BOOT", [0.0, -1.0])
    assert all(procs.is_owned(p.pid, ctime, IID) for _ in range(50))
    assert len(reads) == 1
