"""Log lines: one per decision and action, with role and reason, in text or JSON."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from reconciler.report import logs
from reconciler.core.outcomes import Outcome, Refusal, Guard
from reconciler.engine.loop import PassResult
from reconciler.core.decisions import Decision, Plan, Reason, Status, Verb, flat
from tests.support.fakes import bad, keep

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture
def capture():
    def make(fmt: str = "text", level: int = logging.INFO) -> io.StringIO:
        stream = io.StringIO()
        logs.setup(fmt, stream=stream, level=level)
        return stream

    yield make
    for handler in list(logs.LOGGER.handlers):
        logs.LOGGER.removeHandler(handler)


def started(role: str = "chat") -> PassResult:
    start = flat(role=role, verb=Verb.START, reason=Reason.MISSING, status=Status.STARTING)
    backoff = flat(role="coder", verb=Verb.WAIT, reason=Reason.BACKOFF,
                       status=Status.BACKOFF, detail="exited 2s ago", retry_in=4.0)
    return PassResult(plan=Plan(decisions=(start, backoff)),
                      outcomes=(Outcome(role=role, verb=Verb.START, ok=True, pid=123),))


def test_text_lines_name_role_verb_reason_and_outcome(capture):
    """An action reads `<UTC> chat start (missing) ok pid 123`; a wait says when it retries."""
    out = capture("text")
    logs.log_pass(started())
    lines = out.getvalue().splitlines()
    assert re.fullmatch(TS + r" chat start \(missing\) ok pid 123", lines[0]), lines
    assert re.fullmatch(TS + r" coder wait \(backoff\) backoff: exited 2s ago; retry in 4s",
                        lines[1]), lines
    assert len(lines) == 2


def test_json_lines_carry_the_same_facts_as_fields(capture):
    """Each JSON line is an object with ts, level, msg, role, verb, reason and the outcome."""
    out = capture("json")
    logs.log_pass(started())
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["role"] == "chat" and first["verb"] == "start" and first["reason"] == "missing"
    assert first["ok"] is True and first["pid"] == 123 and first["event"] == "action"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["verb"] == "wait" and second["retry_in"] == 4.0 and second["level"] == "info"


def test_failed_action_is_a_warning(capture):
    """A failed action logs at WARNING with the executor's detail."""
    out = capture("text")
    result = PassResult(plan=Plan(decisions=(
        flat(role="chat", verb=Verb.RESTART, reason=Reason.SPEC_CHANGED, why="ctx 1 → 2"),)),
        outcomes=(Outcome(role="chat", verb=Verb.RESTART, ok=False,
                          refusal=Refusal(guard=Guard.NO_MARKER, detail="not ours"),
                          detail="the running server was left alone"),))
    logs.log_pass(result)
    assert ("warning: chat restart (spec_changed: ctx 1 → 2) FAILED: refused: not ours; "
            "the running server was left alone") in out.getvalue()


def test_unchanged_decisions_are_quiet_in_a_daemon(capture):
    """With the previous pass given, an unchanged keep is DEBUG; a changed one is INFO."""
    out = capture("text")
    first = PassResult(plan=Plan(decisions=(keep("chat"), keep("coder"))))
    last = logs.log_pass(first, {})
    assert out.getvalue().count(" keep (in_sync)") == 2
    out.truncate(0), out.seek(0)
    changed = flat(role="coder", verb=Verb.WAIT, reason=Reason.LOADING, status=Status.LOADING)
    logs.log_pass(PassResult(plan=Plan(decisions=(keep("chat"), changed))), last)
    assert out.getvalue().count("\n") == 1 and "coder wait (loading)" in out.getvalue()


def test_problems_are_logged_with_file_and_line(capture):
    """Every manifest problem is one line with FILE:LINE: $.path: message."""
    out = capture("text")
    logs.log_problems(bad("too big", "unknown key").problems, kept_last_good=True)
    text = out.getvalue()
    assert "m/chat.yaml:3: $.spec.serve.port: too big" in text
    assert "m/chat.yaml:4: $.spec.serve.port: unknown key" in text
    assert "keeping the last good desired state" in text


def test_setup_is_idempotent(capture):
    """Calling setup twice leaves one handler: no doubled lines."""
    capture("text")
    out = capture("text")
    logs.emit("hello")
    assert out.getvalue().count("hello") == 1


def test_a_line_says_the_pid_and_the_retry_once(capture):
    """The pid (also in the outcome's text) and a retry the reason names appear once."""
    out = capture("text")
    result = PassResult(
        plan=Plan(decisions=(
            flat(role="chat", verb=Verb.RESTART, reason=Reason.CRASHED, why="restart 1 of 3"),
            flat(role="coder", verb=Verb.WAIT, reason=Reason.BACKOFF, why="retry in 2s",
                     status=Status.BACKOFF, retry_in=2.0))),
        outcomes=(Outcome(role="chat", verb=Verb.RESTART, ok=True, pid=9),))
    logs.log_pass(result)
    first, second = out.getvalue().splitlines()
    assert first.endswith(" chat restart (crashed: restart 1 of 3) ok pid 9")
    assert result.outcomes[0].text() == "pid 9"  # as the outcome line and the event say it
    assert second.count("retry in") == 1


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_log_line_never_carries_a_control_character_raw(capture, fmt):
    """§1.5 text never reaches a terminal raw: a decision's detail holding ESC or C1 (a server's
    words, a recorded text) is logged escaped, and a JSON line is still the same value."""
    out = capture(fmt)
    hostile = flat(role="chat", verb=Verb.WAIT, reason=Reason.BACKOFF, status=Status.BACKOFF,
                   detail="exit: \x1b[2J\x9b2J\x7f", retry_in=4.0)
    logs.log_pass(PassResult(plan=Plan(decisions=(hostile,))))
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x9b\x7f"), text
    if fmt == "json":
        assert json.loads(text)["detail"] == hostile.detail
    else:
        assert "exit: \\x1b[2J\\x9b2J\\x7f" in text
