"""Re-adoption: our own servers that a killed reconciler spawned but never recorded (SHELL).

A pass records a server's pid right after spawning it (``recording.spawned``),
but a reconciler can be killed between the two. The server then runs,
unrecorded; the next pass must take it back rather than start a second one
(BEHAVIOUR §3). ``find`` looks for such processes; ``record`` writes what
it found, each with an ``adopt`` event. A plan-only pass calls ``find``
alone, to show what an applying pass would see.

A process is taken back only when it carries a desired role's instance
marker, leads its own group, runs as the ``run_as`` uid (or ours) and works
in that instance's directory: what ``spawn`` makes. Its launch digest is the
current one only if its argv and environment are exactly the current
launch's; otherwise a restart follows (spec_changed). It holds its footprint
in the ledger like any server we run.
"""

from __future__ import annotations

import os

import attrs

from reconciler import events, identity, procs, records
from reconciler.decisions import Decision, Reason, Verb
from reconciler.desired import Desired
from reconciler.observed import Remembered, RoleRecord
from reconciler.runtimes import spec_of


def find(remembered: Remembered, desired: Desired, root: str) -> tuple[RoleRecord, ...]:
    """Records for the unrecorded servers of desired managed roles (see the module docstring)."""
    wanted = {}
    for role in desired.roles:
        if not role.managed or not spec_of(role.runtime).launched:
            continue
        record = remembered.role(role.name)
        if record is not None and procs.is_owned(record.pid, record.create_time,
                                                 record.instance_id):
            continue
        wanted[identity.instance_id(role)] = (role, record)
    if not wanted:
        return ()
    uid = desired.node.run_as.uid if desired.node.run_as else os.geteuid()
    cwds = {iid: os.path.join(root, iid) for iid in wanted}
    models = {m.name: m for m in desired.models}
    out = []
    for iid, hits in sorted(procs.find_marked(wanted, cwds=cwds, uid=uid).items()):
        role, record = wanted[iid]
        pid, ctime, cmdline, environ = max(hits, key=lambda h: h[1])
        launch = identity.launch(role, models, desired.node, os.environ, root)
        same = (launch is not None and environ == dict(launch.env)
                and _runs(cmdline, launch.argv))
        base = record or records.new_record(role, Decision(
            role=role.name, verb=Verb.START, reason=Reason.MISSING, instance_id=iid))
        out.append(attrs.evolve(
            base, instance_id=iid, pid=pid, create_time=ctime, exited_at=None,
            launch_digest=launch.digest if same else "unknown: re-adopted",
            launch_argv=launch.argv if same else cmdline,
            reserved=role.memory.footprint, terminal=None, terminal_detail="",
        ))
    return tuple(out)


def record(store, found: tuple[RoleRecord, ...], *, at: float) -> None:
    """Write what ``find`` found, each with its ``adopt`` event."""
    for found_record in found:
        store.put_role(found_record)
        store.add_event(events.readopted(found_record, at=at))


def merged(remembered: Remembered, found: tuple[RoleRecord, ...]) -> Remembered:
    """``remembered`` with the re-adopted records in (what the store holds after ``record``)."""
    by_name = {r.name: r for r in remembered.roles} | {r.name: r for r in found}
    return Remembered(roles=tuple(by_name[name] for name in sorted(by_name)))


def _runs(cmdline: tuple[str, ...], argv: tuple[str, ...]) -> bool:
    """Does a process's cmdline run ``argv``? (A script's interpreter comes first.)"""
    if not argv or argv[0] not in cmdline:
        return False
    start = cmdline.index(argv[0])
    return cmdline[start:] == argv
