"""The executor: does what a Plan says, and guards again (SHELL; BEHAVIOUR §2, §4, §6).

``apply(plan)`` walks the decisions in plan order (unload → stop → restart →
start, as the planner orders them) and turns each acting one into an
``Outcome`` value. It trusts the plan for *what* to do but re-checks the
safety rules itself, so a buggy plan cannot make it

* signal a process it does not own (pid + create time + marker, re-checked
  before every single signal),
* act on a port outside the allowlist, or on a decision without an
  instance id, or send a packet to a non-loopback host,
* start over a port something else accepts connections on, or
* start something whose memory was counted as freed by a stop that failed.

A stop is ``stop.stop`` (SIGTERM → grace → SIGKILL on the process group,
ownership asked before every signal). A runtime that loads models on a
server it does not launch (Ollama) is sent exactly the requests its
``RuntimeSpec`` describes (``load_request``/``unload_request``, read back by
``read_load``), like the deep-health request: nothing here knows a path or
a body, and nothing else is ever sent.

Size: every verb's action with the guards it must pass again (ownership,
allowlist, loopback) before it is sent; the stop itself is ``stop.py``'s.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol, assert_never

import attrs

from reconciler.system import failpoints
from reconciler.world import probe, procs, spawn
# The stop algorithm, and what it returns, for the executor's callers too.
from reconciler.world.stop import EXPOSED_GRACE, StopResult, stop  # noqa: F401
from reconciler.core.ownership import MARKER_ENV
from reconciler.core import loopback
from reconciler.core.decisions import (
    Decision, Forget, GiveUp, Keep, Load, Plan, Reason, Refuse, Restart, Start, Stop, Target,
    Unload, Verb, Wait)
from reconciler.core.desired import Launch, NodeConfig
from reconciler.core.outcomes import Guard, Outcome, Refusal
from reconciler.runtimes import spec_of
from reconciler.runtimes.spec import RuntimeSpec


@attrs.frozen(kw_only=True)
class ActionResult:
    ok: bool
    status: int | None = None  # HTTP status, when one came back
    refusal: Refusal | None = None  # not sent: a guard said no
    error: str = ""
    detail: str = ""


class Hooks(Protocol):
    """What the pass adds around an action (``act.py``): last checks, and the record."""

    def before_start(self, decision: Decision) -> Refusal | None:
        """Called before every spawn (START, RESTART) and Ollama LOAD; a Refusal stops it."""

    def before_stop(self, decision: Decision) -> Refusal | None:
        """§9 right before a stop: the router drains the role (a refusal calls it off)."""

    def before_act(self, decision: Decision) -> None:
        """Called right before the first step that cannot be undone: a signal, a spawn."""

    def orphan_refusal(self, decision: Decision) -> Refusal | None:
        """Called before an orphan's stop: the proof of ownership, checked again."""

    def after_spawn(self, decision: Decision, result: spawn.SpawnResult) -> None:
        """Called right after a successful spawn, before anything else happens."""

    def after_stop(self, decision: Decision, outcome: Outcome) -> None:
        """Called right after a stop that ended its server (not an orphan's: no record)."""


class NoHooks:
    def before_start(self, decision: Decision) -> Refusal | None:
        return None

    def before_stop(self, decision: Decision) -> Refusal | None:
        return None

    def before_act(self, decision: Decision) -> None:
        pass

    def orphan_refusal(self, decision: Decision) -> Refusal | None:
        return Refusal(guard=Guard.NOT_PROVEN, detail="no proof of ownership to check")

    def after_spawn(self, decision: Decision, result: spawn.SpawnResult) -> None:
        pass

    def after_stop(self, decision: Decision, outcome: Outcome) -> None:
        pass


# ---------------------------------------------------------------- model loads


def load_model(runtime: RuntimeSpec, host: str, port: int, tag: str, keep_alive: float, *,
               timeout: float) -> ActionResult:
    """Load ``tag`` into a running server of ``runtime`` and set its keep-alive (negative = forever)."""
    seconds, problem = _keep_alive_seconds(keep_alive)
    if isinstance(problem, Refusal):
        return ActionResult(ok=False, refusal=problem)
    if problem:
        return ActionResult(ok=False, error=problem)
    if runtime.load_request is None:
        return ActionResult(ok=False, error=f"{runtime} loads no models")
    return _send(runtime, host, port, runtime.load_request(tag, seconds), timeout)


def unload_model(runtime: RuntimeSpec, host: str, port: int, tag: str, *,
                 timeout: float) -> ActionResult:
    """Unload ``tag``. The planner only asks for models we loaded (``ownership.our_load``)."""
    if runtime.unload_request is None:
        return ActionResult(ok=False, error=f"{runtime} unloads no models")
    return _send(runtime, host, port, runtime.unload_request(tag), timeout)


def _send(runtime: RuntimeSpec, host: str, port: int, request, timeout: float) -> ActionResult:
    """One request the runtime's spec built, to a loopback host only; its answer read by the spec."""
    if not loopback.is_loopback_host(host):
        return ActionResult(ok=False, refusal=_not_loopback(host))
    assert runtime.read_load is not None
    answer = probe.send_sync(host, port, request, timeout=timeout)
    ok, line = runtime.read_load(request, answer)
    return ActionResult(ok=ok, status=answer.status, error="" if ok else line,
                        detail=line if ok else "")


def _keep_alive_seconds(keep_alive: float) -> tuple[int, str | Refusal]:
    """Whole seconds for Ollama: -1 is forever; a fraction rounds up (never down to 0)."""
    if math.isnan(keep_alive):
        return 0, "keep_alive is not a number"
    if keep_alive < 0:
        return -1, ""
    if keep_alive == 0:
        return 0, Refusal(guard=Guard.KEEP_ALIVE_ZERO,
                          detail="keep_alive 0 would unload the model it loads")
    if math.isinf(keep_alive):
        return -1, ""
    return math.ceil(keep_alive), ""


# ---------------------------------------------------------------- apply

_FREES_MEMORY = frozenset({Verb.STOP, Verb.RESTART, Verb.UNLOAD})
_CLAIMS_MEMORY = frozenset({Verb.START, Verb.LOAD})
_NEEDS_PORT = frozenset({Verb.START, Verb.RESTART, Verb.LOAD, Verb.UNLOAD})
_SKIPPED = "an earlier stop failed and its memory was counted"


def apply(
    plan: Plan,
    *,
    node: NodeConfig,
    allowed: Callable[[int], bool],
    hooks: Hooks | None = None,
) -> tuple[Outcome, ...]:
    """Carry out the acting decisions in plan order: one Outcome per acting decision.

    Decisions that do nothing (keep, wait, refuse, …) get no Outcome. When a
    stop, restart or unload does not really free its memory (the process is
    not gone, the unload failed), the later starts and loads that reserve
    memory are skipped: the plan counted that memory as free.
    """
    hooks = hooks if hooks is not None else NoHooks()
    outcomes: list[Outcome] = []
    memory_held = False
    for decision in plan.decisions:
        if not decision.acts:
            continue
        if memory_held and _claims(decision):
            outcome = _outcome(decision, ok=False, skipped=True, detail=_SKIPPED)
        else:
            outcome = _apply_one(decision, node, allowed, hooks)
        if decision.verb in _FREES_MEMORY and not _freed(decision, outcome):
            memory_held = True
        outcomes.append(outcome)
    return tuple(outcomes)


def _claims(decision: Decision) -> bool:
    """Does this action need memory the plan counted as freed by an earlier one?

    Host memory (``reserve``) or memory on devices (§7.1 ``devices``): a start
    placed on a GPU that a failed stop still occupies must wait too.
    """
    if decision.verb in _CLAIMS_MEMORY:
        return decision.reserve > 0 or bool(decision.devices)
    # A restart that grows its footprint (a bigger ctx or kv) claims the difference.
    return decision.verb is Verb.RESTART and decision.reserve > decision.release


def _freed(decision: Decision, outcome: Outcome) -> bool:
    match decision.act:
        case Unload():
            return outcome.ok
        case Restart(replaces=None):
            return True  # a crashed server's restart: nothing was running to hold memory
    return outcome.exited


def _outcome(decision: Decision, **fields) -> Outcome:
    return Outcome(role=decision.role, verb=decision.verb, at=time.time(), **fields)


def _refused(decision: Decision, guard: Guard, detail: str) -> Outcome:
    return _outcome(decision, ok=False, refusal=Refusal(guard=guard, detail=detail))


def _not_loopback(host: str) -> Refusal:
    return Refusal(guard=Guard.NOT_LOOPBACK, detail=f"{host} is not a loopback address")


def _apply_one(d: Decision, node: NodeConfig, allowed: Callable[[int], bool], hooks: Hooks) -> Outcome:
    if not d.instance_id:
        return _refused(d, Guard.NO_INSTANCE_ID, "decision without instance_id")
    needs_port = d.verb in _NEEDS_PORT
    if needs_port and (d.port is None or not allowed(d.port)):
        return _refused(d, Guard.PORT_NOT_ALLOWED, f"port {d.port} is outside the allowed ports")
    host = _host(d)
    if needs_port and not loopback.is_loopback_host(host):
        return _outcome(d, ok=False, refusal=_not_loopback(host))
    # One case per verb, each with what its payload carries: a stop always has
    # the process it targets, a load its tag; no other combination exists.
    match d.act:
        case Stop(target=target):
            return _stopping(d, target, node, hooks)
        case Restart() as restart:
            return _restarting(d, restart, host, node, hooks)
        case Start(launch=launch):
            return _start(d, launch, host, hooks)
        case Load(tag=tag, keep_alive=keep_alive):
            runtime = _loader(d)
            if isinstance(runtime, Outcome):
                return runtime
            refusal = hooks.before_start(d)
            if refusal is not None:
                return _outcome(d, ok=False, refusal=refusal)
            keep = keep_alive if keep_alive is not None else node.keep_alive
            result = load_model(runtime, host, d.port, tag, keep, timeout=node.deep_timeout)
        case Unload(tag=tag):
            runtime = _loader(d)
            if isinstance(runtime, Outcome):
                return runtime
            result = unload_model(runtime, host, d.port, tag, timeout=node.deep_timeout)
        case Keep() | Wait() | Refuse() | GiveUp() | Forget():
            raise AssertionError(f"{d.verb} does not act")  # apply() passes acting verbs only
        case _:
            assert_never(d.act)
    return _outcome(d, ok=result.ok, refusal=result.refusal,
                    detail=result.detail if result.ok else result.error)


def _loader(d: Decision) -> RuntimeSpec | Outcome:
    """The runtime that loads a load's or unload's model (an Outcome: refused, none does)."""
    if d.runtime is None or not spec_of(d.runtime).loads_models:
        return _refused(d, Guard.NO_LOADER, f"{d.verb} for a runtime that loads no models")
    return spec_of(d.runtime)


def _stopping(d: Decision, target: Target, node: NodeConfig, hooks: Hooks) -> Outcome:
    if d.reason is Reason.ORPHAN:
        # §4: an orphan is ours only by proof (no record names it): proven again now.
        refusal = hooks.orphan_refusal(d)
        if refusal is not None:
            return _outcome(d, ok=False, refusal=refusal)
    elif d.reason is not Reason.EXPOSED:
        # §9 the router closes the role's route and drains it before the stop.
        refusal = hooks.before_stop(d)
        if refusal is not None:
            return _outcome(d, ok=False, refusal=refusal)
    if d.reason is not Reason.ORPHAN:
        hooks.before_act(d)
    # §5: a server reachable beyond loopback gets 3 s, not the usual grace.
    exposed = d.reason is Reason.EXPOSED
    stopped = _stop(d, target, min(node.stop_grace, EXPOSED_GRACE) if exposed else node.stop_grace)
    if stopped.exited and d.reason is not Reason.ORPHAN:
        # §7 the memory is free now: recorded before a later start in this
        # pass claims it (an eviction, then the start it made room for).
        hooks.after_stop(d, stopped)
    return stopped


def _restarting(d: Decision, restart: Restart, host: str, node: NodeConfig,
                hooks: Hooks) -> Outcome:
    # Everything that can refuse the new launch is checked while the old
    # server still serves: a model that fails verification must not cost
    # the running one. The port check waits: the old server holds it.
    refusal = _launch_refusal(d, restart.launch, hooks)
    if refusal is not None:
        kept = "the running server was left alone" if restart.replaces is not None else ""
        return _outcome(d, ok=False, refusal=refusal, detail=kept)
    hooks.before_act(d)
    if restart.replaces is None:  # a crashed server's restart: nothing left to stop
        stopped = _outcome(d, ok=True, exited=True, detail="")
    else:
        if d.reason is Reason.SPEC_CHANGED:
            # §9 a new generation replaces a server that answers: its route is closed and
            # drained first, as for a stop (an instance's requests go to the others, a
            # lone role's wait for the new server). A hung or unresponsive one is not
            # drained: what it holds would never finish.
            refusal = hooks.before_stop(d)
            if refusal is not None:
                return _outcome(d, ok=False, refusal=refusal)
        stopped = _stop(d, restart.replaces, node.stop_grace)
    if not stopped.exited:
        return stopped
    failpoints.reach("stopped")
    # Verified again now: the stop took up to stop_grace, and what is
    # spawned must be what was verified (the lazy re-check only stats).
    started = _start(d, restart.launch, host, hooks)
    return attrs.evolve(started, exited=True, detail="; ".join(
        x for x in (stopped.detail, started.detail) if x))


def _stop(d: Decision, target: Target, grace: float) -> Outcome:
    if target.create_time is None:  # the type forbids it; ownership is checked all the same
        return _refused(d, Guard.NO_CREATE_TIME,
                        f"no recorded create time for pid {target.pid}; no signal sent")
    result = stop(target.pid, target.create_time, target.owner_id or d.instance_id or "",
                  grace=grace)
    detail = result.error or result.detail
    if result.killed:
        detail = "; ".join(x for x in (f"SIGKILL after {grace:g}s", detail) if x)
    return _outcome(d, ok=result.ok, exited=result.gone, detail=detail)


def _launch_refusal(d: Decision, launch: Launch | None, hooks: Hooks) -> Refusal | None:
    """Why this decision's launch may not be spawned (None: it may)."""
    if launch is None:
        return Refusal(guard=Guard.NO_LAUNCH, detail="start without a launch")
    if dict(launch.env).get(MARKER_ENV) != d.instance_id:
        return Refusal(guard=Guard.NO_MARKER,
                       detail=f"the launch does not carry {MARKER_ENV}={d.instance_id}")
    return hooks.before_start(d)


def _start(d: Decision, launch: Launch | None, host: str, hooks: Hooks) -> Outcome:
    # The cheap port check first: a taken port needs no model verification.
    if d.port is not None and procs.accepts_connections(host, d.port):
        return _outcome(d, ok=False, detail=(
            f"port {host}:{d.port} already taken; adopt it instead"))
    refusal = _launch_refusal(d, launch, hooks)
    if refusal is not None:
        return _outcome(d, ok=False, refusal=refusal)
    assert launch is not None
    if d.verb is Verb.START:  # (a restart wrote its intent before its stop)
        hooks.before_act(d)
    failpoints.reach("before-spawn")
    result = spawn.spawn(launch)
    failpoints.reach("after-spawn")
    if not result.ok:
        return _outcome(d, ok=False, detail=result.error)
    hooks.after_spawn(d, result)
    return _outcome(d, ok=True, pid=result.pid, create_time=result.create_time)


def _host(d: Decision) -> str:
    """The serve host: from the decision, else the launch's ``--host``, else 127.0.0.1."""
    if d.host:
        return d.host
    argv = d.launch.argv if isinstance(d.launch, Launch) else ()
    for flag, value in zip(argv, argv[1:]):
        if flag == "--host":
            return value
    return "127.0.0.1"
