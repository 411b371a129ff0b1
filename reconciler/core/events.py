"""The event log's vocabulary, and which decisions are news (PURE).

``reconcile events`` shows an append-only log: one ``Event`` per decision
worth a line, per re-adopted server, per operator start and per change of
the manifests' validity. Every kind written is an ``EventKind``; the store
writes what it is given and reads it back, nothing more.

Which decisions are news (``for_decision``) — a watch pass can come every
second, and the log must not grow by a line per role per pass while a role
stays as it was. A decision is logged when

* it acts (start, stop, restart, load, unload), or
* the role's record changed status (terminal state, restart count, or
  running ↔ exited), or
* it answers an operator start (even a "keep"), or
* it says something the role's last event does not (kind, reason, detail).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from reconciler.core.decisions import Decision, Verb
from reconciler.core.observed import RoleRecord

if TYPE_CHECKING:  # only a pass that acts makes outcomes
    from reconciler.core.outcomes import Outcome

#: The pseudo-role of the events about the manifest set as a whole.
MANIFESTS = "manifests"


class _Kind(enum.StrEnum):
    """What ``EventKind`` can do; its members are made below, from ``Verb`` and the others."""

    @classmethod
    def of(cls, verb: Verb) -> "EventKind":
        return cls(verb.value)


#: What an event records (the ``verb`` column of the log; the words stay as shown):
#: every plan ``Verb`` under its own name and word (derived, so a new verb is a new
#: kind, never a second list to keep in step; ``FETCH`` is logged under the Model's
#: name: ``fetch_started``), then the kinds that are no decision.
EventKind = _Kind("EventKind", [
    *((verb.name, verb.value) for verb in Verb),
    ("READOPTED", "adopt"),  # our own server found unrecorded, and recorded
    ("OPERATOR_START", "operator-start"),  # `reconcile start NAME`
    ("MANIFESTS_INVALID", "invalid"),  # the manifest set became invalid (watch keeps the last good)
    ("MANIFESTS_VALID", "valid"),  # … and valid again
    ("ROLLED_BACK", "rollback"),  # §13 a staged revision failed here: back to the one before
], module=__name__, qualname="EventKind")


#: Kinds that leave a role waiting for an operator (gave up again, refused).
NEEDS_OPERATOR = frozenset({EventKind.GIVE_UP, EventKind.REFUSE})


@attrs.frozen(kw_only=True)
class Event:
    """One line of the event log; ``id`` is the store's, once it is written."""

    role: str
    kind: EventKind
    reason: str  # a plan Reason for decisions; a fixed word for the other kinds
    detail: str = ""
    ok: bool | None = None  # None: nothing was attempted
    git_commit: str | None = None
    at: float
    id: int | None = None


# ---------------------------------------------------------------- decisions


def decision_detail(decision: Decision, outcome: Outcome | None) -> str:
    """The decision's own words, then what acting on it did."""
    detail = decision.why or decision.detail
    said = outcome.text() if outcome is not None else ""
    return "; ".join(part for part in (detail, said) if part)


def for_decision(
    decision: Decision,
    outcome: Outcome | None,
    *,
    before: RoleRecord | None,
    after: RoleRecord | None,
    last: Event | None,
    operator_started: bool,
    git_commit: str | None,
    at: float,
) -> Event | None:
    """The event for ``decision`` if it is news (the module docstring's rule), else None.

    ``before``/``after`` are the role's record around this decision,
    ``last`` the role's newest event so far.
    """
    event = Event(
        role=decision.role, kind=EventKind.of(decision.verb), reason=str(decision.reason),
        detail=decision_detail(decision, outcome),
        ok=None if outcome is None else (outcome.ok and not outcome.skipped),
        git_commit=git_commit, at=at,
    )
    if (decision.acts or operator_started or status_changed(before, after)
            or not repeats(event, last)):
        return event
    return None


def status_changed(before: RoleRecord | None, after: RoleRecord | None) -> bool:
    """Did the record appear, vanish, or change terminal state, restarts or liveness?"""
    if before is None or after is None:
        return before is not after
    return (before.terminal, before.restarts, before.exited_at is None) != (
        after.terminal, after.restarts, after.exited_at is None)


def repeats(event: Event, last: Event | None) -> bool:
    """Does ``event`` say what ``last`` already said?"""
    return last is not None and (last.kind, last.reason, last.detail) == (
        event.kind, event.reason, event.detail)


# ---------------------------------------------------------------- the other kinds


def fetch_started(model: str, why: str, failure: str, *, git_commit: str | None,
                  at: float) -> Event:
    """§1.6 a fetch started (or could not): logged under the Model's name."""
    return Event(role=model, kind=EventKind.FETCH, reason="missing",
                 detail="; ".join(p for p in (why, failure) if p), ok=not failure,
                 git_commit=git_commit, at=at)


def readopted(record: RoleRecord, *, at: float) -> Event:
    return Event(role=record.name, kind=EventKind.READOPTED, reason="readopted",
                 detail=f"found our own server pid {record.pid} that was never recorded", at=at)


def operator_start(role: str, detail: str, *, at: float) -> Event:
    return Event(role=role, kind=EventKind.OPERATOR_START, reason="operator", detail=detail,
                 at=at)


def manifests_invalid(detail: str, *, git_commit: str | None, at: float) -> Event:
    return Event(role=MANIFESTS, kind=EventKind.MANIFESTS_INVALID, reason="problems",
                 detail=detail, ok=False, git_commit=git_commit, at=at)


def manifests_valid(*, git_commit: str | None, at: float) -> Event:
    return Event(role=MANIFESTS, kind=EventKind.MANIFESTS_VALID, reason="fixed",
                 detail="manifests are valid again", ok=True, git_commit=git_commit, at=at)
