"""Log lines on stderr, ``--log-format text|json`` (SHELL).

One line per decision and per action, each with its role and reason, so
"why did it (not) do anything?" is answerable from the log alone::

    2026-11-29T17:00:00Z chat start (missing) ok pid 123
    2026-11-29T17:00:04Z chat wait (backoff) backoff: retry in 4s
    2026-11-29T17:00:09Z manifests invalid (problems) m/chat.yaml:7: $.spec.serve.port: …

The JSON form carries the same facts as fields, one object per line
(``ts``, ``level``, ``msg``, then ``role``, ``verb``, ``reason``, ``ok``,
``pid``, ``status``, ``detail``, ``retry_in`` where they apply).

Everything goes through the stdlib logger ``reconciler``; ``setup()``
attaches one handler with the chosen formatter. ``log_pass(result)`` is what
``--once`` and every ``watch`` pass call. ``Hush`` says a kind of line (a
client's mistake at the router or the metrics endpoint) at most once per
interval, with the count of those it left unsaid, never with a traceback
unless asked.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import IO, Any, Callable, Mapping

from reconciler.core.errors import shown, shown_json

LOGGER = logging.getLogger("reconciler")
_FIELDS = "fields"  # the LogRecord attribute that carries structured fields


def _utc(ts: float, *, millis: bool) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{base}.{int(ts * 1000) % 1000:03d}Z" if millis else f"{base}Z"


class TextFormatter(logging.Formatter):
    """``<UTC time> <message>``; warnings and errors say so."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        line = f"{_utc(record.created, millis=False)} {level}{record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return shown(line)  # §1.5: a decision's text never reaches a terminal raw


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``msg`` and the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _utc(record.created, millis=True),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        out.update(getattr(record, _FIELDS, None) or {})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return shown_json(json.dumps(out, ensure_ascii=False, default=str))


def setup(fmt: str = "text", *, stream: IO[str] | None = None, level: int = logging.INFO
          ) -> logging.Handler:
    """Route the ``reconciler`` logger to ``stream`` (stderr) in ``fmt``; idempotent."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for old in list(LOGGER.handlers):
        LOGGER.removeHandler(old)
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    LOGGER.propagate = False
    return handler


def emit(msg: str, *, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    """One line: ``msg`` in text form, ``msg`` plus ``fields`` in JSON form."""
    clean = {k: v for k, v in fields.items() if v is not None and v != ""}
    LOGGER.log(level, "%s", msg, extra={_FIELDS: clean}, exc_info=exc_info)


# ---------------------------------------------------------------- a pass


def _seconds(value: float) -> str:
    return f"{value:.3g}s" if value < 10 else f"{value:.0f}s"


def decision_line(decision, outcome=None) -> tuple[str, dict[str, Any]]:
    """The message and fields of one decision (and its outcome, if it acted)."""
    verb, reason = str(decision.verb), str(decision.reason)
    head = f"{decision.role} {verb} ({reason}{': ' + decision.why if decision.why else ''})"
    fields: dict[str, Any] = {
        "role": decision.role, "verb": verb, "reason": reason, "why": decision.why,
        "status": str(decision.status), "detail": decision.detail,
    }
    if outcome is not None:
        mark = "skipped" if outcome.skipped else ("ok" if outcome.ok else "FAILED")
        tail = mark + (f" pid {outcome.pid}" if outcome.pid and outcome.ok else "")
        detail = outcome.text(pid=False)  # the pid is said once, right after the mark
        if detail:
            tail += f": {detail}"
        fields.update(ok=bool(outcome.ok and not outcome.skipped), skipped=outcome.skipped or None,
                      pid=outcome.pid, outcome=outcome.text())
        return f"{head} {tail}", fields
    tail = str(decision.status) + (f": {decision.detail}" if decision.detail else "")
    if decision.retry_in is not None:
        fields["retry_in"] = round(decision.retry_in, 3)
        if "retry in" not in head + tail:
            tail += f"; retry in {_seconds(decision.retry_in)}"
    return f"{head} {tail}", fields


def log_pass(result, last: Mapping[str, tuple] | None = None) -> dict[str, tuple]:
    """Log one line per decision of ``result``; returns what to pass as ``last`` next time.

    Acting decisions always log at INFO. With ``last`` (a daemon's previous
    pass), a non-acting decision identical to the role's previous one logs at
    DEBUG, so a quiet watch says nothing every resync; without it every
    decision logs at INFO (``--once``).
    """
    seen: dict[str, tuple] = {}
    plan = getattr(result, "plan", None)
    if plan is None:
        return dict(last or {})
    outcomes = {o.role: o for o in getattr(result, "outcomes", ())}
    for decision in plan.decisions:
        key = (str(decision.verb), str(decision.reason), decision.why, str(decision.status),
               decision.detail)
        seen[decision.role] = key
        outcome = outcomes.get(decision.role) if decision.acts else None
        msg, fields = decision_line(decision, outcome)
        if outcome is not None:
            level = logging.INFO if outcome.ok or outcome.skipped else logging.WARNING
        elif last is not None and last.get(decision.role) == key:
            level = logging.DEBUG
        else:
            level = logging.INFO
        emit(msg, level=level, event="action" if outcome is not None else "decision", **fields)
    return seen


def log_problems(problems, *, kept_last_good: bool) -> None:
    """Every manifest problem with its file:line, then what was done about it."""
    for problem in problems:
        fields = problem.as_dict() if hasattr(problem, "as_dict") else {}
        emit(f"manifests invalid (problems) {problem}", level=logging.ERROR,
             event="problem", role="manifests", verb="invalid", reason="problems", **fields)
    then = ("keeping the last good desired state" if kept_last_good
            else "no good desired state yet: nothing will be changed")
    emit(f"manifests invalid: {len(problems)} problem(s); {then}", level=logging.ERROR,
         event="problems", role="manifests", verb="invalid", reason="problems",
         count=len(problems))


def log_warnings(warnings) -> None:
    for warning in warnings:
        emit(f"manifests warning: {warning}", level=logging.WARNING, event="warning",
             role="manifests")


# ---------------------------------------------------------------- quiet logs

_emit = emit

class Hush:
    """One log line per kind per ``interval`` seconds; the rest counted, said with the next."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 emit: Callable[..., None] | None = None, event: str = "router") -> None:
        self.interval = interval
        self.event = event
        self._clock = clock
        self._emit = emit if emit is not None else _emit
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}
        self.lines = 0  # lines written (for tests: the log volume)

    def say(self, kind: str, message: str, *, level: int = logging.WARNING,
            exc_info=None) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._unsaid[kind] = self._unsaid.get(kind, 0) + 1
                return False
            self._last[kind] = now
            unsaid = self._unsaid.pop(kind, 0)
            self.lines += 1
        if unsaid:
            message += f" ({unsaid} more like it in the last {self.interval:g}s)"
        self._emit(message, level=level, event=self.event, exc_info=exc_info or False,
                   reason=kind)
        return True
