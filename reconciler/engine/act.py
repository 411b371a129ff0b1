"""The act room of a pass: the executor, with the pass's checks around each action (SHELL).

``execute.apply`` does what the plan says and guards again. The pass adds
what it alone can know, as the executor's hooks:

* right before a spawn (or an Ollama load), the models it will serve are
  verified for real (``modelstore.Verifier``: lazily by file stamps, a full
  hash the first time) and their paths checked for containment; a model that
  fails is a ``Refusal`` and nothing is spawned; so are the files of the
  Program it runs (§14, ``programstore.check``: stamps, a rehash of any file
  whose stamp changed), a changed or missing one named with both digests;
* right before a stop, the router (when there is one: ``gate``) closes the
  role's route and drains its requests in flight (§9: a stop never cuts a
  request); an idle stop it calls off is a ``Refusal`` (``in_use``); right
  after a spawn, the router starts watching the new server's readiness;
* right before the first signal or spawn of an action, its intent is written
  (``recording.intend``): a reconciler killed in the middle leaves a record
  that says its server's exit was its own doing (§3, §4);
* right after a spawn, the new server's whole record is written in one step
  (``recording.spawned``); right after a stop, the stopped server's record
  (``recording.stopped``), so the store never shows a memory the stop freed
  as held beside the start that claims it;
* before an orphan's stop, its proof of ownership is checked again.

Then §5 "after start": the servers this pass started are given a short,
bounded wait to listen, and one that listens beyond loopback is stopped at
once (``exposure.check_new``), not left exposed until the next pass.

A plan in which nothing acts never loads the executor at all.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable

from reconciler.system import failpoints
from reconciler.engine import recording
from reconciler.core.decisions import Decision, Plan, Stop
from reconciler.core.desired import Desired
from reconciler.core.observed import ModelState
from reconciler.runtimes import spec_of

if TYPE_CHECKING:  # only a pass that acts makes outcomes (and imports them)
    from reconciler.core.outcomes import Outcome, Refusal
    from reconciler.engine.seams import Gate, PassStore, Verifier


def act(plan: Plan, desired: Desired, store: PassStore, *, verifier: Verifier | None = None,
        root: str = "", clock: Callable[[], float] = time.time,
        gate: Gate | None = None) -> tuple[Outcome, ...]:
    """Carry out the plan's acting decisions; one Outcome each, in plan order."""
    if not plan.changes:
        return ()
    from reconciler.world import execute, exposure
    from reconciler.models import modelstore

    hooks = _PassHooks(store, desired, verifier or modelstore.Verifier(store), root, clock, gate)
    outcomes = execute.apply(plan, node=desired.node, allowed=desired.node.port_allowed,
                             hooks=hooks)
    return exposure.check_new(plan, outcomes, desired.node)


class _PassHooks:
    """``execute.Hooks``: verify before a spawn, write intents and records, prove orphans."""

    def __init__(self, store: PassStore, desired: Desired, verifier: Verifier, root: str,
                 clock: Callable[[], float], gate: Gate | None = None) -> None:
        self.store, self.desired, self.verifier = store, desired, verifier
        self.root, self.clock, self.gate = root, clock, gate

    def before_stop(self, decision: Decision) -> Refusal | None:
        """§9 the router closes the role's route and drains it; an idle stop it calls off."""
        if self.gate is None:
            return None
        why = self.gate.before_stop(decision)
        if why is None:
            return None
        from reconciler.core.outcomes import Guard, Refusal

        return Refusal(guard=Guard.IN_USE, detail=why)

    def before_start(self, decision: Decision) -> Refusal | None:
        spec = self.desired.role(decision.role)
        if spec is None or not spec_of(spec.runtime).launched:
            return None
        from reconciler.models import modelstore
        from reconciler.core.outcomes import Guard, Refusal

        for name in (spec.model, *spec.serve.weight_refs):
            model = self.desired.model(name)
            if model is None:
                continue
            check = self.verifier.verify(model)
            if check.state is not ModelState.VERIFIED:
                return Refusal(guard=Guard.MODEL_UNVERIFIED,
                               detail=check.detail or str(check.state))
            # Paths handed to the server are re-checked for containment now,
            # right before the spawn, not only when the hashes were computed.
            try:
                modelstore.canonical_paths(model)
            except modelstore.ModelPathError as exc:
                return Refusal(guard=Guard.MODEL_PATH, detail=str(exc))
        program = self.desired.program_for(spec)
        if program is not None:  # §14 every byte that runs is the Program's
            from reconciler.models import programstore

            checked = programstore.check(program, self.store)
            if not checked.ok:
                return Refusal(guard=Guard.PROGRAM_UNVERIFIED, detail=checked.detail)
        return None

    def before_act(self, decision: Decision) -> None:
        recording.intend(self.store, self.desired, decision, self.clock())
        failpoints.reach("intent-written")

    def orphan_refusal(self, decision: Decision) -> Refusal | None:
        from reconciler.world import procs
        from reconciler.core.outcomes import Guard, Refusal

        node = self.desired.node
        uid = node.run_as.uid if node.run_as else os.geteuid()
        target = decision.act.target if isinstance(decision.act, Stop) else None  # only stops
        if (target is not None and target.create_time is not None and self.root
                and procs.proves_ours(target.pid, target.create_time,
                                      decision.instance_id or "", self.root, uid)):
            return None
        return Refusal(guard=Guard.NOT_PROVEN, detail=(
            f"pid {decision.pid} no longer proves itself ours (marker, uid, "
            "working directory, process group); no signal sent"))

    def after_stop(self, decision: Decision, outcome) -> None:
        recording.stopped(self.store, self.desired, decision, self.clock())

    def after_spawn(self, decision: Decision, result) -> None:
        recording.spawned(self.store, self.desired, decision, result.pid, result.create_time,
                          now=self.clock())
        failpoints.reach("spawn-recorded")
        if self.gate is not None:
            self.gate.spawned(decision)  # §9 the router watches it for readiness from now
