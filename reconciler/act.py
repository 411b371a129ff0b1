"""The act room of a pass: the executor, with the pass's checks around each spawn (SHELL).

``execute.apply`` does what the plan says and guards again. The pass adds
two things it alone can know, as the executor's hooks:

* right before a spawn (or an Ollama load), the models it will serve are
  verified for real (``modelstore.Verifier``: lazily by file stamps, a full
  hash the first time) and their paths checked for containment; a model that
  fails is a ``Refusal`` and nothing is spawned;
* right after a spawn, the pid is recorded (``recording.spawned``).

A plan in which nothing acts never loads the executor at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler import recording
from reconciler.decisions import Decision, Plan
from reconciler.desired import Desired
from reconciler.observed import ModelState
from reconciler.runtimes import spec_of

if TYPE_CHECKING:  # only a pass that acts makes outcomes (and imports them)
    from reconciler.outcomes import Outcome, Refusal


def act(plan: Plan, desired: Desired, store, *, verifier=None) -> tuple[Outcome, ...]:
    """Carry out the plan's acting decisions; one Outcome each, in plan order."""
    if not plan.changes:
        return ()
    from reconciler import execute, modelstore

    hooks = _PassHooks(store, desired, verifier or modelstore.Verifier(store))
    return execute.apply(plan, node=desired.node, allowed=desired.node.port_allowed,
                         hooks=hooks)


class _PassHooks:
    """``execute.Hooks``: verify the models before a spawn, record the pid right after it."""

    def __init__(self, store, desired: Desired, verifier) -> None:
        self.store, self.desired, self.verifier = store, desired, verifier

    def before_start(self, decision: Decision) -> Refusal | None:
        spec = self.desired.role(decision.role)
        if spec is None or not spec_of(spec.runtime).launched:
            return None
        from reconciler import modelstore
        from reconciler.outcomes import Guard, Refusal

        for name in (spec.model, spec.serve.draft_model):
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
        return None

    def after_spawn(self, decision: Decision, result) -> None:
        recording.spawned(self.store, self.desired, decision, result.pid, result.create_time)
