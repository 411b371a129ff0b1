"""§4 generations: what a role runs, and whether the record's holds still apply (PURE).

A role's generation is its launch digest (§3) for a launched role, the tag and
keep_alive it loads for a model-loading runtime (Ollama), plus
``spec.restarted_at`` (``identity.generation``). Every start, restart and load
records the generation it tried (``records``); the restart count, the backoff
clock and a hold (gave-up, stopped-exposed) belong to that generation. A record
from before generations stands for its launch digest. ``plan`` asks ``current``
and ``is_new`` per role, and words the change with ``launch_changes`` /
``load_changes``.
"""

from __future__ import annotations

from typing import Mapping

from reconciler.planner import identity
from reconciler.core.desired import ModelSpec, ProgramSpec, RoleSpec
from reconciler.core.observed import RoleRecord
from reconciler.runtimes import SPECS, spec_of
from reconciler.core.units import format_duration


def tag_of(spec: RoleSpec, models: Mapping[str, ModelSpec]) -> str | None:
    """The Ollama tag a role's Model names (None: none)."""
    model = models.get(spec.model or "")
    return model.ollama_tag if model is not None else None


def current(spec: RoleSpec | None, digest: str | None, tag: str | None) -> str | None:
    """What a managed role runs now — its launch, or the load it asks of Ollama; None: nothing."""
    if spec is None or not spec.managed:
        return None
    if digest is not None:
        return identity.generation(digest, spec.restarted_at)
    if spec_of(spec.runtime).loads_models:
        return identity.generation(identity.load_runs(tag, spec.keep_alive), spec.restarted_at)
    return None


def recorded(record: RoleRecord) -> str | None:
    """The generation a record's holds and count belong to (its launch digest before generations)."""
    if record.generation is not None:
        return record.generation
    return record.launch_digest if SPECS[record.runtime].launched else None  # (every role)


def is_new(generation: str | None, record: RoleRecord | None) -> bool:
    """A fresh start: the record names another generation than the one wanted now."""
    return generation is not None and record is not None and (
        recorded(record) not in (None, generation))


def _restarted(before: str | None, after: str | None) -> str:
    return f"restarted_at {before or '(none)'} → {after or '(none)'}"


def launch_changes(record: RoleRecord, spec: RoleSpec | None, argv, digest: str | None, *,
                   fresh: bool, owner_id: str | None, instance_id: str,
                   devices: tuple[str, ...] = (), program: ProgramSpec | None = None,
                   before: ProgramSpec | None = None) -> str:
    """What makes a launched role's generation new: the argv's changes, restarted_at, the instance.

    ``devices``: the ones the new launch is built with (§7.1); a move is named first.
    ``program``/``before``: §14 the Program the new launch runs and the one the record's
    ran (None: a path, or not known): a switch is named by versions (``program b11434 →
    b11500``), not by paths nor as ``launch environment changed``.
    """
    parts = []
    if argv is not None and record.launch_digest is not None and digest != record.launch_digest:
        said = (identity.argv_changes(record.launch_argv, argv) if record.launch_argv
                else "a new launch")
        if program is not None and before is not None and before != program:
            said = _program_change(said, record.launch_argv[0], argv[0], before, program)
        before = tuple(i for i, _ in record.devices)
        if before != devices:
            wanted = spec.devices if spec is not None else None
            after = ", ".join(devices) if devices else (
                f"any {wanted}" if wanted is not None else "(none)")
            parts.append(f"devices {', '.join(before) or '(none)'} → {after}")
            said = "" if said == "launch environment changed" else said
        if said:
            parts.append(said)
    wanted = spec.restarted_at if spec is not None else None
    if fresh and record.restarted_at != wanted:
        parts.append(_restarted(record.restarted_at, wanted))
    if not parts and owner_id is not None and owner_id != instance_id:
        parts.append(f"running instance {owner_id} is not {instance_id}")
    return ", ".join(dict.fromkeys(parts)) or "a new generation"


def _program_change(said: str, old: str, new: str, before: ProgramSpec,
                    program: ProgramSpec) -> str:
    """§14 ``program b11434 → b11500`` in place of ``program /a/llama-server →
    /b/llama-server`` or of ``launch environment changed`` (the same path)."""
    if before.version != program.version:
        words = f"program {before.version} → {program.version}"
    else:
        words = f"program {before.name} → {program.name} ({program.version})"
    moved = f"program {old} → {new}"
    if old != new and said.startswith(moved):
        return words + said[len(moved):]
    if said == "launch environment changed":
        return words
    return f"{words}, {said}"


def load_changes(record: RoleRecord, spec: RoleSpec, tag: str | None) -> str:
    """What makes an Ollama role's generation new (the record keeps only its tag and restarted_at)."""
    if record.restarted_at != spec.restarted_at:
        return _restarted(record.restarted_at, spec.restarted_at)
    keep = spec.keep_alive
    shown = "forever" if keep is not None and keep < 0 else format_duration(keep or 0)
    return f"a new generation: {tag} with keep_alive {shown}"
