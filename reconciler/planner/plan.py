"""The planner: desired + observed + remembered → Plan, as a pipeline of stages (PURE).

``plan(desired, observed, remembered, ctx, now)`` gives every role named in
the manifests or in the state store exactly one ``Decision`` with a reason.
It runs the stages of ``planner/stages/`` in order, each a function from one
value to the next (``stages/values.py``): the per-role views; the ladder
(``stages/ladder.py``: per role, the first matching rung wins; each rung is
one commented branch citing BEHAVIOUR.md); orphans; the fetch gate (§1.6);
placement (§7: what planned stops, unloads and give-ups release is counted
before any new reservation, and claims are considered restarts first, then
starts/loads, each in (port, name) order; §7.1 devices); eviction (§9); device
use (§7.1); execution order and the requeue.

Contract with the shell (what it persists from a Decision):

* ``restarts`` → the record's count (this is how ``stable_after`` and operator
  starts reset it, and how crash restarts and Ollama reloads raise it).
* ``reserved ← reserved − release + reserve`` once the action is done.
* ``exited_at``: when the shell first sees a recorded server dead (or a tag we
  loaded gone from ``/api/ps``) it stores ``exited_at = now``, whatever the
  decision; until then the planner counts the exit as first observed now.
* ``stop``/``exposed`` → terminal ``stopped-exposed``; ``give-up`` → terminal
  ``gave-up``.  ``forget`` → drop the record.

Choices where the contract is silent:

* A model whose check is ``unverified`` (plan-only run, nothing hashed) does
  not block a planned start: the executor verifies before it spawns.
  ``mismatch``/``missing`` refuse; ``detached`` refuses with status degraded.
* An exposed server is stopped even when the manifest set is empty (§5 beats
  the empty-manifest guard: stopping our own exposed server is the safe way).
* Adopted servers that answer, and Ollama models resident without our
  reservation, hold their declared footprint in the ledger: they use memory.
* A changed Ollama tag first unloads the old tag (if we loaded it and it is
  resident); the new one loads on the next pass.
* Roles that serve one Ollama model on one server are resident together:
  the ledger keeps their exclusions as one (a load that would put any of
  them beside a role one of them excludes is refused; ``validate`` refuses
  such roles excluding each other). Each still counts its own footprint:
  the ledger errs on the side of memory. A removed or stopped role does not
  unload a model another wanted role serves; its record keeps the load ours
  until the last of them lets go (a changed tag just moves on: the old
  model is left to its keep_alive).
* Our Ollama load is gone once a pass has seen the tag leave ``/api/ps``
  (``exited_at`` set, cleared only by our next load): a copy resident after
  that was loaded by someone else, and is never unloaded (§2).
* A new generation (§4: the launch digest, or an Ollama role's tag and
  keep_alive, or ``restarted_at``) is a fresh start: holds, backoff and the
  restart count belong to the generation the record names, so they do not
  apply to a new one, which is started (or restarted, or loaded) at once.
  A record from before generations stands for its launch digest.
* A record a killed pass left mid-work (an ``Intent``) is read as that work
  finished (``intents.finish_interrupted``): our own stop is not a crash.
* A server that stays ``starting`` past ``startup_grace`` is stopped as a
  failed start (``startup_timeout``): counted and backed off like a crash.
* A known bad model outranks backoff: a crashed role whose model is known
  to fail is refused now, not told to wait.
* An orphan (a server of ours by proof that no record holds, §4) is
  stopped; under the empty-manifest guard it is kept, unless exposed.
"""

from __future__ import annotations

from reconciler.core.decisions import Plan, PlanContext
from reconciler.core.desired import Desired
from reconciler.core.observed import Observed, Remembered
from reconciler.planner import launches, rungs
from reconciler.planner.stages import (
    deviceuse,
    eviction,
    fetchgate,
    ladder,
    order,
    orphans,
    placing,
    rolling,
    views,
)
from reconciler.planner.stages.values import make_inputs


def plan(
    desired: Desired, observed: Observed, remembered: Remembered, ctx: PlanContext, now: float
) -> Plan:
    """One decision per role in ``desired`` or ``remembered``, in execution order."""
    viewed = views.stage(make_inputs(desired=desired, observed=observed, remembered=remembered,
                                ctx=ctx, now=now))
    drafted = ladder.stage(viewed)       # §4 one draft per role: the first rung that matches
    drafted = rolling.stage(drafted)     # §12 a new generation: one instance of a group at a time
    drafted = orphans.stage(drafted)     # §4 servers of ours no role wants
    drafted = fetchgate.stage(drafted)   # §1.6 a start waits for its Model's fetch
    placed = placing.stage(drafted)      # §7, §7.1 memory and devices for the claims
    placed = eviction.stage(placed)      # §9 idle on-demand roles make room
    placed = deviceuse.stage(placed)     # §7.1 over its reservation on a device: degraded
    return order.stage(placed)           # §7 execution order; when to look again


def forget() -> None:
    """Empty every memo the planner keeps across passes (the launches, ``views``' kept
    processes and unseen roles, ``rungs``' steady drafts): the next pass works everything
    out anew. Plans are the same either way (``tests/plan/test_launches.py``); benchmarks
    time a first pass with this."""
    launches.forget()
    views.forget()
    rungs.forget()
