"""The liveness rungs: a live server that fails its checks (PURE; §4.1, opt-in per role).

The counters come from ``liveness.look``; here the ladder decides from them.
``managed``: a managed server failing ``failures`` consecutive checks is
restarted (``unresponsive``) under the restart policy, never past
``max_restarts``; fewer failures are reported. ``adopted``: an adopted server
is reported, never restarted. ``failing`` keeps a failing server from winning
its restart count back (``stable_after``), and ``wakes`` is when the watch
daemon looks again because a check is due.
"""

from __future__ import annotations

from typing import Mapping

from reconciler.planner import liveness, policy
from reconciler.core.decisions import Reason, Status, Verb
from reconciler.core.desired import RoleSpec
from reconciler.planner.ledger import Draft
from reconciler.core.observed import ModelCheck, RoleObservation, RoleRecord
from reconciler.planner.rungs import Role, draft, start
from reconciler.core.units import format_duration


def wakes(specs: Mapping[str, RoleSpec], records: Mapping[str, RoleRecord],
          observations: Mapping[str, RoleObservation], now: float) -> list[float]:
    """§4.1 the watch daemon looks again when a liveness check is next due (a requeue
    hint, not a busy loop): for each role with checks whose server answers or is alive."""
    due = []
    for name, spec in specs.items():
        if spec.liveness is None:
            continue  # (opt-in: most roles have no checks, and cost nothing here)
        rec, obs = records.get(name), observations.get(name)
        if rec is None or obs is None:
            continue
        alive = obs.process is not None and obs.process.alive and obs.process.owned
        if not (alive or (not spec.managed and obs.probe is not None)):
            continue
        counters = liveness.look(spec.liveness, rec.liveness, obs.probe, rec.started_at, now)
        due.append(liveness.next_check(spec.liveness, counters, rec.started_at, now))
    return due


def failing(spec: RoleSpec | None, record: RoleRecord | None, probe, now: float) -> bool:
    """§4.1 a server failing liveness checks is not "answering" for stable_after: a hang
    that /health does not show (no progress) must not win its restart count back."""
    if spec is None or spec.liveness is None or record is None:
        return False
    counters = liveness.look(spec.liveness, record.liveness, probe, record.started_at, now)
    return counters.failures > 0


def managed(r: Role, checks: Mapping[str, ModelCheck], now: float) -> Draft | None:
    """§4.1 a managed server failing ``failures`` consecutive liveness checks is restarted
    (``unresponsive``) under the restart policy: counted, after delay(restarts) since its
    first failed check, and never past ``max_restarts`` (then it is reported, not touched:
    it is alive, and a live server is never given up). Fewer failures: reported."""
    spec, rec = r.spec, r.record
    if spec is None or spec.liveness is None or rec is None:
        return None
    counters = liveness.look(spec.liveness, rec.liveness, r.obs.probe, rec.started_at, now)
    if counters.failures == 0:
        return None
    said, why = liveness.summary(spec.liveness, counters), liveness.counted(spec.liveness, counters)
    if not liveness.unresponsive(spec.liveness, counters):
        return draft(r, Verb.KEEP, Reason.UNRESPONSIVE, Status.DEGRADED, said, why=why,
                     holds=r.reserved,
                     retry_in=liveness.next_check(spec.liveness, counters, rec.started_at, now))
    n, most = r.restarts, r.policy.max_restarts
    if n >= most:
        held = f"not restarted: max_restarts {most} reached; run `reconcile start {r.name}`"
        return draft(r, Verb.KEEP, Reason.UNRESPONSIVE, Status.DEGRADED, f"{said}; {held}",
                     why=f"{why}; {held}", holds=r.reserved)
    state = policy.retry(n, counters.since if counters.since is not None else now, now, r.policy)
    if state.left > 0:
        left = format_duration(state.left)
        return draft(r, Verb.KEEP, Reason.UNRESPONSIVE, Status.DEGRADED,
                     f"{said}; restart {n + 1} of {most} in {left}",
                     why=f"{why}; restart {n + 1} of {most} in {left}", retry_in=state.left,
                     holds=r.reserved)
    return start(r, checks, Verb.RESTART, Reason.UNRESPONSIVE, Status.DEGRADED,
                 f"{said}; restart {n + 1} of {most}",
                 why=f"{counters.detail}; restart {n + 1} of {most}", restarts=n + 1, keeps=True)


def adopted(r: Role, status: Status, detail: str,
            now: float) -> tuple[Status, str]:
    """§4.1 an adopted server failing its liveness checks is reported, never restarted."""
    spec, rec = r.spec, r.record
    if spec is None or spec.liveness is None or rec is None:
        return status, detail
    counters = liveness.look(spec.liveness, rec.liveness, r.obs.probe, None, now)
    if counters.failures == 0:
        return status, detail
    said = liveness.summary(spec.liveness, counters)
    if liveness.unresponsive(spec.liveness, counters):
        return Status.DEGRADED, f"{said}; adopted: reported, never restarted"
    return status, f"{detail}; {said}"
