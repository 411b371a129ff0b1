"""Our own servers that no record holds: re-adopted, or found orphaned (SHELL).

A pass records a server's pid right after spawning it (``recording.spawned``),
but a reconciler can be killed between the two. The server then runs,
unrecorded. ``survey`` finds every such process of this node: one that proves
itself ours (``procs.find_ours``: it leads its own group, runs as the
``run_as`` uid or ours, works in exactly ``<data_root>/<marker>`` and carries
that marker — what ``spawn`` makes) and that no record's pid and create time
name. Then (BEHAVIOUR §3, §4):

* one that carries the **current** instance id of a desired managed role
  whose record owns no live process is **re-adopted** (the newest one, when
  several): the next pass takes it back rather than start a second one. Its
  launch digest is the current one only if its argv and environment are
  exactly the current launch's; otherwise a restart follows (spec_changed).
  ``record`` writes it, with an ``adopt`` event;
* every other one is an **orphan** (a killed pass spawned it for a launch
  the manifests no longer ask for: a reverted port edit, a removed role; or
  a second server of one instance): the planner stops it (reason ``orphan``).

A plan-only pass calls ``survey`` alone, to show what an applying pass would see.
"""

from __future__ import annotations

import itertools
import os

import attrs

from reconciler.core import events, ownership
from reconciler.planner import identity, records
from reconciler.world import procs
from reconciler.core.decisions import Decision, Reason, Start
from reconciler.core.desired import Desired, Launch
from reconciler.core.devices import Assignment, shares
from reconciler.planner.launches import device_env
from reconciler.core.observed import Orphan, Remembered, RoleRecord, ServerProcess
from reconciler.runtimes import spec_of


@attrs.frozen(kw_only=True)
class Survey:
    readopted: tuple[RoleRecord, ...] = ()  # records for servers taken back
    orphans: tuple[Orphan, ...] = ()  # ours by proof, wanted by no role


def survey(remembered: Remembered, desired: Desired, root: str) -> Survey:
    """This node's unrecorded servers of ours, re-adopted or orphaned (the module docstring)."""
    uid = desired.node.run_as.uid if desired.node.run_as else os.geteuid()
    # The recorded are passed over before their proof is read (a converged node: all of them).
    unrecorded = procs.find_ours(
        root, uid, known=lambda pid, ctime: _recorded(pid, ctime, remembered))
    if not unrecorded:
        return Survey()
    wanted = _readoptable(remembered, desired)
    models = {m.name: m for m in desired.models}
    readopted, taken = [], set()
    for iid, (role, record) in sorted(wanted.items()):
        hits = [h for h in unrecorded if h[2] == iid]
        if not hits:
            continue
        pid, ctime, _, cmdline, environ = max(hits, key=lambda h: h[1])
        taken.add(pid)
        launch, assignment = _launch_of(role, models, desired, root, cmdline, environ)
        same = (launch is not None and environ == dict(launch.env)
                and _runs(cmdline, launch.argv))
        base = record or records.new_record(role, Decision(
            role=role.name, act=Start(launch=None), reason=Reason.MISSING, instance_id=iid))
        readopted.append(attrs.evolve(
            base, instance_id=iid, process=ServerProcess(pid=pid, create_time=ctime), exited_at=None,
            started_at=ctime, healthy_since=None,
            launch_digest=launch.digest if same else "unknown: re-adopted",
            launch_argv=launch.argv if same else cmdline,
            generation=identity.generation(launch.digest, role.restarted_at) if same else None,
            restarted_at=role.restarted_at if same else None,
            reserved=role.memory.footprint, terminal=None, terminal_detail="", intent=None,
            devices=assignment.pairs() if same and assignment else (),
        ))
    orphans = tuple(Orphan(pid=pid, create_time=ctime, instance_id=iid)
                    for pid, ctime, iid, _, _ in sorted(unrecorded, key=lambda h: h[0])
                    if pid not in taken)
    if orphans:
        heard = procs.listeners_by_group([o.pid for o in orphans]) or {}
        orphans = tuple(attrs.evolve(o, listen=heard.get(o.pid, ())) for o in orphans)
    return Survey(readopted=tuple(readopted), orphans=orphans)


def _launch_of(role, models, desired: Desired, root: str, cmdline, environ
               ) -> tuple[Launch | None, Assignment | None]:
    """The current launch the found server runs, and its devices (§7.1, §12).

    A role placed on devices was launched on the devices placement picked, which no
    record says any more: each set the request allows (its ``ids``, or every ``count``
    of the node's devices of a kind the runtime uses) is tried until one gives the
    process's own argv and environment; else the launch without devices (a restart
    follows, spec_changed, as for any other launch).
    """
    node = desired.node
    plain = identity.launch(role, models, node, os.environ, root, desired.programs)
    req, rt = role.devices, spec_of(role.runtime).devices
    if req is None or rt is None or not node.devices:
        return plain, None
    usable = [d.id for d in sorted(node.devices, key=lambda d: (d.kind, d.index))
              if d.kind in rt.kinds]
    sets = [req.ids] if req.ids else list(itertools.combinations(usable, req.count or 0))
    launcher = identity.Launcher(node, os.environ, root, desired.programs)
    iid = identity.instance_id(role)
    for ids in sets[:256]:
        got = Assignment(ids=tuple(ids), bytes=shares(role.memory.footprint, req.split,
                                                      len(ids)), split=req.split)
        argv = launcher.argv(role, models, got)
        if argv is None or not _runs(cmdline, argv):
            continue
        launch = launcher.launch(argv, iid, None, device_env(role.runtime, got), role=role)
        if environ == dict(launch.env):
            return launch, got
    return plain, None


def _recorded(pid: int, ctime: float, remembered: Remembered) -> bool:
    """Does a record name this process (its pid and create time)?"""
    return any(r.pid == pid and ownership.same_start(r.create_time, ctime)
               for r in remembered.roles)


def _readoptable(remembered: Remembered, desired: Desired) -> dict[str, tuple]:
    """Current instance id → (role, record) of each desired managed role owning no live process."""
    wanted = {}
    for role in desired.roles:
        if not role.managed or not spec_of(role.runtime).launched:
            continue
        record = remembered.role(role.name)
        if record is not None and procs.is_owned(record.pid, record.create_time,
                                                 record.instance_id):
            continue
        wanted[identity.instance_id(role)] = (role, record)
    return wanted


def record(store, found: tuple[RoleRecord, ...], *, at: float) -> None:
    """Write what ``survey`` re-adopted, each with its ``adopt`` event."""
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
