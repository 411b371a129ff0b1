"""What makes a process or a model load ours: the ownership rules, as predicates (PURE).

The reconciler never signals a process it did not start and never unloads a
model it did not load (BEHAVIOUR §2, §3, §4). The shell reads the facts (the
process table in ``world/procs.py``, the store's records); the rules are here,
one function each, asked by every path that signals or unloads:

* ``owned``: a recorded server is ours when the live process at its pid has
  the recorded create time (a recycled pid fails) and carries our marker
  ``RECONCILER_INSTANCE=<instance id>`` (``MARKER_ENV``, defined here). Asked before every single signal
  (``world/stop.py``, through ``procs.is_owned``), by re-adoption and by
  ``reconcile start``'s hand-over. ``carries`` (the marker alone) picks the
  members of a dead leader's group that the stop's sweep may SIGKILL.
* ``proven``: a process no record names (an orphan, or a spawn a killed pass
  never recorded) is ours only by the whole proof: it leads its own process
  group, runs as the node's uid, works in exactly ``<data root>/<id>`` and
  carries marker ``<id>``. A forged marker fails the rest. Asked by the
  orphan survey (``procs.find_ours``) and again right before an orphan's
  signal (``procs.proves_ours``); its cheap parts (``leads_group``,
  ``instance_in``: no environment read) are asked first by the survey.
* ``loaded_by_us`` / ``our_load``: a model on a shared server (Ollama) is
  ours to unload only when our own load put it there (``we_loaded``) and no
  pass has seen it leave memory since (``exited_at`` unset): a copy resident
  after that was loaded by someone else (§2).

Two signals are outside these rules, by design: ``programs.run`` kills its own
child's group on a timeout (a git or version probe it just started), and
``reconcile start`` sends SIGHUP to the lock holder only when
``procs.looks_like_watch`` says it is a ``reconcile watch``.
"""

from __future__ import annotations

import attrs

from reconciler.core.observed import RoleRecord

#: The ownership marker: the environment variable every server we launch carries, its
#: value the instance id (§3). ``planner/identity.py`` puts it into each launch, last, so
#: nothing overrides it; ``world/procs.py`` reads it back; the rules below judge it.
MARKER_ENV = "RECONCILER_INSTANCE"

#: psutil derives create_time from /proc ticks (10 ms); a stored float compared
#: with a fresh reading can differ in the last digits.
CREATE_TIME_SLACK = 0.05


@attrs.frozen(kw_only=True)
class Seen:
    """What the process table says about one live process (``None``: not read)."""

    pid: int
    create_time: float
    marker: str | None  # RECONCILER_INSTANCE in its environment
    pgid: int | None = None
    uid: int | None = None  # its real uid
    cwd: str | None = None


def same_start(recorded: float | None, seen: float) -> bool:
    """Is ``seen`` the recorded create time (within the clock's slack)?"""
    return recorded is not None and abs(seen - recorded) <= CREATE_TIME_SLACK


def carries(marker: str | None, instance_id: str) -> bool:
    """Does a process's ``RECONCILER_INSTANCE`` marker name this instance?"""
    return bool(instance_id) and marker == instance_id


def owned(seen: Seen | None, pid: int | None, create_time: float | None,
          instance_id: str) -> bool:
    """§3 pid + create time + marker: may the recorded server be signalled?"""
    return (seen is not None and bool(pid) and seen.pid == pid
            and same_start(create_time, seen.create_time)
            and carries(seen.marker, instance_id))


def instance_dir(root: str, instance_id: str) -> str:
    """``<root>/<instance id>``: where a server of that instance works."""
    return f"{root.rstrip('/')}/{instance_id}"


def leads_group(pid: int, pgid: int | None) -> bool:
    """Does the process lead its own process group (as every server we spawn does)?"""
    return pgid == pid


def instance_in(root: str, cwd: str) -> str | None:
    """The instance id whose directory ``cwd`` is, exactly ``<root>/<id>``; else None."""
    prefix = root.rstrip("/") + "/"
    instance = cwd[len(prefix):] if cwd.startswith(prefix) else ""
    return instance if instance and "/" not in instance else None


def proven(seen: Seen, root: str, uid: int) -> str | None:
    """§4 the whole proof for a process no record names: its instance id, or None.

    It leads its own group, runs as ``uid``, works in exactly ``<root>/<id>``
    and carries marker ``<id>``.
    """
    if not leads_group(seen.pid, seen.pgid) or seen.cwd is None:
        return None
    instance = instance_in(root, seen.cwd)
    if instance is None or seen.uid != uid:
        return None
    return instance if carries(seen.marker, instance) else None


def loaded_by_us(record: RoleRecord | None) -> bool:
    """§2 our own load put ``record.model_tag`` on its server (it may have left since)."""
    return record is not None and record.we_loaded and bool(record.model_tag)


def our_load(record: RoleRecord | None) -> bool:
    """§2 a model we loaded and no pass has seen leave memory since: ours to unload."""
    return loaded_by_us(record) and record is not None and record.exited_at is None
