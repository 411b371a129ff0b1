"""What wakes the ``watch`` daemon, met in one ``selectors`` wait (SHELL).

``Wakeups.wait(deadline)`` blocks until something asks for a pass (or a
stop) and says why in a ``Wake``:

* a signal, through its wake-up fd (``signals.Wakeups``): SIGHUP is a pass
  now, SIGTERM/SIGINT a stop;
* a manifest change (``filewatch.FileWatch`` pokes the control pipe);
* ``request_pass`` / ``request_demand`` / ``request_stop`` from any thread
  (the router's waiting request is "demand"), through the control pipe;
* a managed server's exit, through the platform's exit watch (``seam.ExitWatch``:
  a pidfd per server on Linux, a polling thread's pipe with ``portable``),
  watching what ``targets_from`` takes from the store;
* the deadline itself (the resync timer or the planner's requeue hint: the
  pass policy, ``daemon/passes.py``, says which and when).

A wake-up carries no meaning beyond "reconcile now" (level-triggered): the
reasons are for the log. Nothing here decides when a pass runs.
"""

from __future__ import annotations

import enum
import logging
import os
import selectors
import time
from typing import Callable, Mapping, Sequence

import attrs

from reconciler.daemon.filewatch import FileWatch
from reconciler.platform import choose
from reconciler.platform.seam import TAG, ExitWatch, Target
from reconciler.report import logs
from reconciler.system import signals

#: The signals the daemon acts on (between passes, through the wake-up fd).
SIGNALS = signals.DAEMON

_CONTROL, _SIGNALS = "control", "signals"
_FILES, _STOP, _NOW, _DEMAND = b"f", b"s", b"p", b"d"


class Cause(enum.StrEnum):
    """Why a pass runs; the value is the reason as the log writes it."""

    START = "start"
    SIGHUP = "SIGHUP"
    FILES = "manifests changed"
    REQUESTED = "requested"
    DEMAND = "demand"
    EXIT = "exited"  # a managed server exited (``Wake.exited`` names the roles)
    RESYNC = "resync"
    REQUEUE = "requeue"
    STOP = "stop"  # SIGTERM, SIGINT or ``request_stop``: no pass, the daemon leaves


@attrs.frozen(kw_only=True)
class Deadline:
    """When the timer wakes the daemon, on the ``monotonic`` clock, and why."""

    at: float
    why: Cause


@attrs.frozen(kw_only=True)
class Wake:
    """Why the daemon woke up, or that it must stop."""

    reasons: tuple[str, ...] = ()  # for the log, in the order they came: "SIGHUP", "chat exited"
    causes: frozenset[Cause] = frozenset()
    exited: tuple[str, ...] = ()  # the roles whose server exited
    stop: bool = False

    @classmethod
    def of(cls, cause: Cause) -> Wake:
        return cls(reasons=(str(cause),), causes=frozenset({cause}))


STOP = Wake(causes=frozenset({Cause.STOP}), stop=True)


class Wakeups:
    """The selector, its pipes, the signal fd, the server exit watch and the file watch."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 exit_watch: Callable[[selectors.BaseSelector], ExitWatch] | None = None) -> None:
        self._monotonic = monotonic
        self._selector = selectors.DefaultSelector()
        self._ctl_r, self._ctl_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._sig_r, self._sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._ctl_r, selectors.EVENT_READ, _CONTROL)
        self._selector.register(self._sig_r, selectors.EVENT_READ, _SIGNALS)
        self.exits = (exit_watch or choose.current().exit_watch)(self._selector)
        self._files: FileWatch | None = None
        self._signals = signals.Wakeups(self._sig_w, SIGNALS)

    # ------------------------------------------------------------ asking (any thread)

    def request_stop(self) -> None:
        self._poke(_STOP)

    def request_pass(self) -> None:
        self._poke(_NOW)

    def request_demand(self) -> None:
        self._poke(_DEMAND)

    def _poke(self, byte: bytes) -> None:
        try:
            os.write(self._ctl_w, byte)
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    # ------------------------------------------------------------ sources

    def install_signals(self) -> None:
        """Our handlers in, the held signals let through (main thread only)."""
        self._signals.install()

    def watch_files(self, paths: Sequence[str]) -> None:
        """Poke on every debounced change under ``paths`` (a missing one: resync only)."""
        self._files = FileWatch(paths, lambda: self._poke(_FILES))
        for path in self._files.missing:
            logs.emit(f"{path} does not exist; not watching it (resync only)",
                      level=logging.WARNING)
        self._files.start()

    def watch_exits(self, targets: Mapping[str, Target]) -> tuple[str, ...]:
        """Watch exactly these servers' exits; the roles whose server is already gone."""
        was_supported = self.exits.supported
        gone = self.exits.sync(targets)
        if was_supported and not self.exits.supported:
            logs.emit(f"no exit notification ({self.exits.unsupported_reason}); "
                      "exits are noticed by the resync timer", level=logging.WARNING)
        return gone

    # ------------------------------------------------------------ waiting

    def wait(self, deadline: Deadline) -> Wake:
        """Block until something asks for a pass (or a stop), at the latest ``deadline``."""
        while True:
            timeout = deadline.at - self._monotonic()
            if timeout <= 0:
                return Wake.of(deadline.why)
            wakes = [self._read(key.data) for key, _ in self._selector.select(timeout)]
            if any(w.stop for w in wakes):
                return STOP
            if any(w.reasons for w in wakes):
                return Wake(reasons=tuple(dict.fromkeys(r for w in wakes for r in w.reasons)),
                            causes=frozenset(c for w in wakes for c in w.causes),
                            exited=tuple(dict.fromkeys(r for w in wakes for r in w.exited)))

    def _read(self, source) -> Wake:
        """What one ready source says (its bytes drained)."""
        if source == _SIGNALS:
            return _from_signals(_drain(self._sig_r))
        if source == _CONTROL:
            return _from_control(bytes(_drain(self._ctl_r)))
        if isinstance(source, tuple) and source[0] == TAG:
            return self._from_exits(self.exits.fired(source))
        return Wake()

    def _from_exits(self, ended: tuple[tuple[str, Target], ...]) -> Wake:
        for role, (pid, _) in ended:
            logs.emit(f"{role} exited (pid {pid}); reconciling now", event="exit", role=role,
                      pid=pid, reason="exited")
        if not ended:
            return Wake()
        return Wake(reasons=tuple(f"{role} exited" for role, _ in ended),
                    causes=frozenset({Cause.EXIT}), exited=tuple(role for role, _ in ended))

    # ------------------------------------------------------------ leaving

    def close(self) -> None:
        if self._files is not None:
            self._files.close()
            self._files = None
        self._signals.restore()
        self.exits.close()
        for fd in (self._ctl_r, self._ctl_w, self._sig_r, self._sig_w):
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass
            try:
                os.close(fd)
            except OSError:
                pass
        self._selector.close()


def targets_from(records) -> dict[str, Target]:
    """The processes to watch: managed roles the store says are running."""
    out: dict[str, Target] = {}
    for record in records:
        if str(record.mode) == "managed" and record.pid and record.exited_at is None:
            out[record.name] = (record.pid, record.create_time)
    return out


def _from_signals(signums: bytes | bytearray) -> Wake:
    stop, causes = False, []
    for signum in signums:
        if signum in (signals.SIGTERM, signals.SIGINT):
            logs.emit(f"received {signals.name(signum)}", event="signal")
            stop = True
        elif signum == signals.SIGHUP:
            causes.append(Cause.SIGHUP)
    return STOP if stop else _of(causes)


def _from_control(data: bytes) -> Wake:
    if _STOP in data:
        return STOP
    byte_causes = ((_FILES, Cause.FILES), (_NOW, Cause.REQUESTED), (_DEMAND, Cause.DEMAND))
    return _of([cause for byte, cause in byte_causes if byte in data])


def _of(causes: list[Cause]) -> Wake:
    return Wake(reasons=tuple(dict.fromkeys(str(c) for c in causes)), causes=frozenset(causes))


def _drain(fd: int) -> bytearray:
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk
