"""§5 after start: the servers a pass started are checked for exposure in that pass (SHELL).

Every pass checks the binding of our running servers (``observe.py``), but a
server started by a pass was only checked by the next one: under cron, one
reachable beyond loopback stayed so for a whole cron interval. So once a
pass has acted, each server it started gets a short, bounded wait
(``LISTEN_WAIT`` in all, the servers side by side) to open its listening
socket; its process group's listeners are read (as root: the socket table;
otherwise a TCP connect to each non-loopback interface address on its port,
300 ms each). One that listens beyond loopback is stopped at once, with the
grace of an exposed server, and its outcome says so (``Outcome.exposed``):
the role is held ``stopped-exposed``. A server not listening by the end of
the wait is checked by the next pass, as before.
"""

from __future__ import annotations

import time

import attrs

from reconciler.world import procs, stop
from reconciler.core import loopback
from reconciler.core.decisions import Plan, Verb
from reconciler.core.desired import NodeConfig
from reconciler.core.outcomes import Outcome

#: How long a pass waits, in all, for the servers it started to listen.
LISTEN_WAIT = 2.0
_POLL = 0.05


def check_new(plan: Plan, outcomes: tuple[Outcome, ...], node: NodeConfig,
              wait: float = LISTEN_WAIT) -> tuple[Outcome, ...]:
    """``outcomes``, with each new server found exposed stopped and marked ``exposed``."""
    decisions = {d.role: d for d in plan.decisions}
    new = {o.role: o for o in outcomes
           if o.verb in (Verb.START, Verb.RESTART) and o.ok and o.pid and o.create_time}
    if not new:
        return outcomes
    heard = _listeners(new, decisions, wait)
    changed = {}
    for role, addresses in heard.items():
        exposed = tuple(a for a in addresses if not loopback.is_loopback(a))
        if not exposed:
            continue
        o, d = new[role], decisions[role]
        grace = min(node.stop_grace, stop.EXPOSED_GRACE)
        stopped = stop.stop(o.pid, o.create_time, d.instance_id or "", grace=grace)
        where = ", ".join(exposed)
        if stopped.gone and stopped.ok:
            changed[role] = attrs.evolve(o, exposed=exposed, detail="; ".join(
                x for x in (o.detail, f"stopped: reachable beyond loopback on {where}") if x))
        else:
            changed[role] = attrs.evolve(o, detail="; ".join(x for x in (
                o.detail, f"reachable beyond loopback on {where}; the stop failed: "
                f"{stopped.error}") if x))
    return tuple(changed.get(o.role, o) if o.role in new else o for o in outcomes)


def _listeners(new: dict[str, Outcome], decisions, wait: float) -> dict[str, tuple[str, ...]]:
    """Each new server's listeners, once it has any (or has died), within ``wait`` seconds."""
    pending = dict(new)
    found: dict[str, tuple[str, ...]] = {}
    deadline = time.monotonic() + wait
    while pending:
        table = procs.listeners_by_group([o.pid for o in pending.values()])
        for role, o in list(pending.items()):
            if table is not None:
                addresses = table.get(o.pid, ())
            else:
                addresses = _by_connecting(decisions[role])
            if addresses or not procs.is_running(o.pid, o.create_time):
                found[role] = addresses
                del pending[role]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(_POLL)
    return found


def _by_connecting(d) -> tuple[str, ...]:
    """Without the socket table (not root): connect on the port, loopback first (§5)."""
    host, port = d.host or "127.0.0.1", d.port
    if not port or not procs.accepts_connections(host, port):
        return ()
    outside = tuple(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
                    for ip in procs.interface_addresses()
                    if procs.accepts_connections(ip, port, timeout=0.3))
    return (f"{host}:{port}", *outside)
