"""Value types of what acting did (PURE): one ``Outcome`` per acting decision.

An action the executor would not take is a ``Refusal`` — which guard said no
(``Guard``) and the particulars — carried by its ``Outcome``, never a message
prefix to be parsed back. The words an operator reads are built from these
fields where they are shown (``Outcome.text``: the outcome lines of
``--once``, the log lines, the event details).
"""

from __future__ import annotations

import enum

import attrs

from reconciler.core.decisions import Verb


class Guard(enum.StrEnum):
    """The rule that refused an action (the executor checks each again, whatever the plan says)."""

    NO_INSTANCE_ID = "no_instance_id"  # a decision that names no instance
    PORT_NOT_ALLOWED = "port_not_allowed"  # a port outside allowed_ports
    NOT_LOOPBACK = "not_loopback"  # a host beyond loopback
    NO_LAUNCH = "no_launch"  # a start without a launch
    NO_MARKER = "no_marker"  # a launch without this instance's RECONCILER_INSTANCE
    NO_CREATE_TIME = "no_create_time"  # a pid to signal without its recorded create time
    NO_MODEL_TAG = "no_model_tag"  # an Ollama load/unload without a tag
    NO_LOADER = "no_loader"  # a load/unload for no runtime, or one that loads no models
    KEEP_ALIVE_ZERO = "keep_alive_zero"  # a load that would unload what it loads
    MODEL_UNVERIFIED = "model_unverified"  # a model that failed verification before a spawn
    MODEL_PATH = "model_path"  # a model path that leaves its root, checked right before a spawn
    PROGRAM_UNVERIFIED = "program_unverified"  # §14 a Program's files differ from their digests
    NOT_PROVEN = "not_proven"  # an orphan that no longer proves itself ours (§4)
    IN_USE = "in_use"  # §9 the router has requests in flight for a role an idle stop would cut


#: Refusals found while acting that, like the planner's own, need an operator
#: (exit 3): the models a start would serve do not verify.
NEEDS_OPERATOR = frozenset({Guard.MODEL_UNVERIFIED, Guard.MODEL_PATH, Guard.PROGRAM_UNVERIFIED})


@attrs.frozen(kw_only=True)
class Refusal:
    """An action not taken because a guard said no, and the particulars."""

    guard: Guard
    detail: str  # "port 80 is outside the allowed ports", "model m: shard a.gguf is missing"

    def __str__(self) -> str:
        return f"refused: {self.detail}"


@attrs.frozen(kw_only=True)
class Outcome:
    """What one acting decision did."""

    role: str
    verb: Verb
    ok: bool
    skipped: bool = False  # not attempted: an earlier stop failed and its memory was counted
    refusal: Refusal | None = None  # not attempted: a guard said no
    detail: str = ""  # what else there is to say ("SIGKILL after 5s", an error)
    pid: int | None = None  # the new process (start/restart)
    create_time: float | None = None
    exited: bool = False  # the stopped process is really gone → memory may be released
    at: float = 0.0  # wall time the action finished
    #: §5 after start: the new server listened beyond loopback here, and was stopped.
    exposed: tuple[str, ...] = ()

    @property
    def needs_operator(self) -> bool:
        """Did acting find what the planner would have refused (a model, an exposed server)?"""
        return bool(self.exposed) or (
            self.refusal is not None and self.refusal.guard in NEEDS_OPERATOR)

    def text(self, *, pid: bool = True) -> str:
        """The outcome in words: ``refused: …``, ``skipped: …``, the detail, ``pid N``.

        ``pid=False`` leaves the pid out, for a line that names it already.
        """
        parts = [str(self.refusal)] if self.refusal is not None else []
        if self.detail:
            parts.append(f"skipped: {self.detail}" if self.skipped else self.detail)
        if pid and self.pid and self.ok:
            parts.append(f"pid {self.pid}")
        return "; ".join(parts)
