"""Why a server exited, in words (PURE; BEHAVIOUR §4: every exit says why).

The shell gathers what is left of a server of ours that ended
(``postmortem.py``: its exit status when it was our child, the last lines of
its ``server.log``, the kernel's log when it killed it for memory) into an
``ExitInfo``; this module turns that into the words ``status``, the plan and
the events show::

    exited (code 1): llama_init_from_model: K cache type q8_0 … does not divide n_embd_head_k=16
    killed by SIGKILL (out of memory): Out of memory: Killed process 4242 (llama-server) …
    exited (exit status unknown: not a child of this reconciler): <last error line of its log>

``headline`` is the first part, ``excerpt`` the one line of the log that most
likely says why (the first error a llama.cpp server logged, the exception a
Python server died of, else ``last log line: …``), ``summary`` both, on one line.

Also here, pure so it can be tested on recorded text: reading the tail of a
log (``tail_lines``) and finding the kernel's out-of-memory kill of a pid in
``/dev/kmsg`` records (``oom_line``): only records of the kernel itself count
(facility 0), which a process writing to ``/dev/kmsg`` cannot forge.
"""

from __future__ import annotations

import re
from typing import Iterable

from reconciler.core.observed import ExitInfo

#: Lines of a server's log kept with its exit (``status NAME --json`` shows them).
LOG_LINES = 20
#: What starts the line ``spawn`` writes into a log that already holds an earlier
#: run (the log is appended to across restarts): what came before is not this run's.
RUN_MARK = "--- reconciler: "
#: The longest excerpt a one-line detail carries.
EXCERPT_CHARS = 160

# Linux's numbers (a pure module may not import ``signal``); the rest print as numbers.
_SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS",
}
SIGKILL = 9
NOT_A_CHILD = "exit status unknown: not a child of this reconciler"
NOT_RECORDED_YET = "exit status not recorded yet"

# llama.cpp's log prefix: "0.00.009.286 E " (time since start, then the level).
_LLAMA_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([DIWE]) ")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ERROR_WORDS = re.compile(
    r"\b(error|fatal|failed|failure|cannot|can't|unable|panic|abort(ed)?|exception|"
    r"denied|not found|no such|out of memory|segmentation fault|killed)\b", re.IGNORECASE)
_KILLED = re.compile(r"Killed process (\d+) ")
_OOM_KILL = re.compile(r"\boom-kill:.*\bpid=(\d+)\b")


def signal_name(number: int) -> str:
    return _SIGNALS.get(number, f"signal {number}")


def from_returncode(returncode: int) -> ExitInfo:
    """``Popen.returncode`` semantics: negative is the signal that ended the child."""
    if returncode < 0:
        return ExitInfo(known=True, signal=-returncode)
    return ExitInfo(known=True, code=returncode)


def headline(info: ExitInfo) -> str:
    """``exited (code 1)``, ``killed by SIGKILL (out of memory)``, ``exited (… unknown …)``."""
    if info.known and info.signal is not None:
        memory = " (out of memory)" if info.oom else ""
        return f"killed by {signal_name(info.signal)}{memory}"
    if info.known and info.code is not None:
        return f"exited (code {info.code})"
    if info.oom:
        return "killed (out of memory)"
    if info.pending:
        return f"exited ({NOT_RECORDED_YET})"
    return f"exited ({NOT_A_CHILD})"


def excerpt(lines: Iterable[str]) -> str:
    """The one log line most likely to say why the server ended ("" for an empty log)."""
    cleaned = [c for c in (clean(line) for line in lines) if c[1].strip()]
    if not cleaned:
        return ""
    texts = [text for _, text in cleaned]
    # A Python server (mlx_lm.server) dies of an exception: its last line names it.
    if any(t.startswith("Traceback (most recent call last)") for t in texts):
        # Frames are indented (``clean`` keeps leading blanks); the exception is not.
        raised = [t for t in texts
                  if not t.startswith((" ", "\t")) and not t.startswith("Traceback")]
        if raised:
            return _short(raised[-1])
    # llama.cpp marks its levels: the first error of this run is the cause, the
    # later ones ("exiting due to model loading error") are its consequences.
    marked = [text for level, text in cleaned if level == "E"]
    if marked:
        return _short(marked[0])
    worded = [text for _, text in cleaned if _ERROR_WORDS.search(text)]
    # Nothing reads like an error (a SIGKILL leaves an ordinary last line): say
    # that it is only the last line, not a cause.
    return _short(worded[0]) if worded else _short(f"last log line: {texts[-1]}")


def clean(line: str) -> tuple[str, str]:
    """``(level, text)``: colour codes and llama.cpp's time/level prefix removed.

    The level is llama.cpp's letter (``E`` error, ``W`` warning …) or "".
    """
    text = _ANSI.sub("", line).rstrip()
    found = _LLAMA_PREFIX.match(text)
    if found is None:
        return "", text
    return found.group(1), " ".join(text[found.end():].split())


def said(info: ExitInfo) -> str:
    """The one line that says why: the kernel's OOM line, else the log's ``excerpt``."""
    return _short(info.oom) if info.oom else excerpt(info.log)


def summary(info: ExitInfo) -> str:
    """One line: the headline, and what ``said`` why after a colon."""
    why = said(info)
    return f"{headline(info)}: {why}" if why else headline(info)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def tail_lines(data: bytes, count: int = LOG_LINES) -> tuple[str, ...]:
    """The last run's last ``count`` lines, from a log's tail bytes.

    Lines before the last ``RUN_MARK`` belong to an earlier server; a partial
    first line (the read began in the middle of it) is dropped.
    """
    text = data.decode("utf-8", "replace")
    lines = text.splitlines()
    if lines and not text.startswith("\n") and len(lines) > count:
        lines = lines[1:]  # most likely cut in the middle by the read's start
    marks = [i for i, line in enumerate(lines) if line.startswith(RUN_MARK)]
    if marks:
        lines = lines[marks[-1] + 1:]
    return tuple(line.rstrip("\r") for line in lines[-count:])


def oom_line(records: Iterable[str], pid: int, *, after_us: int = 0) -> str:
    """The kernel's message about killing ``pid`` for memory, from ``/dev/kmsg`` records.

    A record is ``PRI,SEQ,USEC,FLAGS;MESSAGE``. Only the kernel's own records
    count (facility 0: what user space writes to /dev/kmsg is filed under
    another facility), and only those after ``after_us`` (microseconds since
    boot at the process's start: a recycled pid's old kill is not this one).
    """
    found = ""
    for record in records:
        head, sep, message = record.partition(";")
        if not sep:
            continue
        fields = head.split(",")
        try:
            priority, usec = int(fields[0]), int(fields[2])
        except (IndexError, ValueError):
            continue
        if priority >> 3 != 0 or usec < after_us:
            continue
        message = message.split("\n", 1)[0].strip()
        for pattern in (_KILLED, _OOM_KILL):
            hit = pattern.search(message)
            if hit is not None and int(hit.group(1)) == pid:
                # "Killed process" says the most (its size); keep the first of those.
                if not found or (pattern is _KILLED and _KILLED.search(found) is None):
                    found = message
    return found
