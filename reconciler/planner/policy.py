"""Restart backoff and restart counting (PURE).

The rules ``plan()`` consults but that are not themselves a decision:

* ``delay(attempt, policy)`` — BEHAVIOUR §4: ``min(base·2^min(attempt,16), cap)``.
* ``restart_count(...)`` — the count a role carries into this pass: the
  ``stable_after`` reset and the operator-start reset.

The residency ledger (BEHAVIOUR §7) has its own module, ``ledger.py``.
"""

from __future__ import annotations

import attrs

from reconciler.core.desired import RestartPolicy
from reconciler.core.observed import Health, RoleRecord

#: Requeue hint for things that are in progress (loading, starting): polling,
#: not backoff (STYLE: "still loading, look again in 1 s" ≠ "crashed, wait 8 s").
POLL = 1.0


def delay(attempt: int, policy: RestartPolicy) -> float:
    """Seconds to wait after an exit before restart number ``attempt + 1``."""
    return float(min(policy.base * 2 ** min(max(attempt, 0), 16), policy.cap))


@attrs.frozen(kw_only=True)
class Retry:
    """Where a dead server (or an evicted Ollama model) stands in its backoff."""

    gave_up: bool  # the count reached max_restarts
    left: float  # seconds until the next attempt may run; <= 0 means now


def retry(restarts: int, exited_at: float, now: float, policy: RestartPolicy) -> Retry:
    """§4: give up at ``max_restarts``; otherwise wait ``delay(restarts)`` from the exit."""
    return Retry(
        gave_up=restarts >= policy.max_restarts,
        left=exited_at + delay(restarts, policy) - now,
    )


def restart_count(
    record: RoleRecord | None,
    policy: RestartPolicy,
    now: float,
    *,
    answering: bool,
    operator_start: bool,
) -> int:
    """The restart count this pass starts from.

    ``reconcile start NAME`` resets it to 0.  Otherwise only ``stable_after``
    does, and only on evidence: the server is answering *now* and has been
    since ``healthy_since`` for at least ``stable_after``.  (A dead server is
    judged by the count the shell persisted on the last pass that saw it
    answering, so a server that answers one probe and dies keeps counting.)
    """
    if operator_start or record is None:
        return 0
    if (
        answering
        and record.healthy_since is not None
        and now - record.healthy_since >= policy.stable_after
    ):
        return 0
    return record.restarts


def answering(health: Health | None) -> bool:
    return health is Health.UP
