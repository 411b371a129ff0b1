"""§4 orphans: the plan's decision for a server of ours that no role wants (PURE).

The shell finds them (``readopt.survey``: marker, uid, working directory under
this node's data root, process-group leader; no record names them) and passes
them in ``Observed.orphans``. Each gets one decision: ``stop (orphan)``, or,
under the empty-manifest guard, ``keep (empty_manifests)`` unless it listens
beyond loopback (an exposed server of ours is always stopped, §5). Its plan
line names its instance, or ``instance@pid`` when two servers of one instance
are orphans (one decision per name).
"""

from __future__ import annotations

import functools
from typing import Iterable

from reconciler.core import loopback
from reconciler.core.decisions import Decision, Keep, Reason, Status, Stop, Target
from reconciler.planner.ledger import Draft
from reconciler.core.observed import Orphan


def drafts(orphans: Iterable[Orphan], names: set[str], guard: bool) -> list[Draft]:
    """One draft per orphan whose name is no role's (a role's own decision covers it)."""
    found = sorted(orphans, key=lambda o: (o.instance_id, o.pid))
    ids = [o.instance_id for o in found]
    twice = {iid for iid in ids if ids.count(iid) > 1}
    return [_draft(o, guard, twice) for o in found if o.instance_id not in names]


def _draft(o: Orphan, guard: bool, twice: set[str]) -> Draft:
    exposed = [a for a in o.listen if not loopback.is_loopback(a)]
    ports = sorted({int(a.rsplit(":", 1)[1]) for a in o.listen if a.rsplit(":", 1)[1].isdigit()})
    decision = functools.partial(
        Decision, role=f"{o.instance_id}@{o.pid}" if o.instance_id in twice else o.instance_id,
        port=ports[0] if ports else None, instance_id=o.instance_id)
    target = Target(pid=o.pid, create_time=o.create_time, owner_id=o.instance_id)
    what = f"pid {o.pid} of instance {o.instance_id}, which no role wants"
    if guard and not exposed:
        return Draft(decision=decision(
            act=Keep(running=target), reason=Reason.EMPTY_MANIFESTS, status=Status.RUNNING,
            detail=f"an orphan ({what}); nothing is stopped without --allow-empty"))
    return Draft(decision=decision(
        act=Stop(target=target), reason=Reason.ORPHAN, status=Status.RUNNING, why=what,
        detail=f"an orphan: {what}"))
