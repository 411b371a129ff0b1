"""Value types of a plan (PURE): decisions with reasons, statuses, verbs.

``plan()`` turns desired, observed and remembered values into a ``Plan``: one
``Decision`` per role saying what the executor does (its ``Verb``) and why
(its ``Reason``), and what the role *is* now (its ``Status``). What the
executor needs for the verb is the decision's payload (``act``): one small
class per verb (``Start``, ``Stop``, ``Load`` …), so no decision carries a
field its verb has no use for (docs/architecture.md: adding a verb).

Size: the plan's vocabulary in one place: the enums, one payload class per
verb beside the ``Decision`` that carries it, and the flat spelling (``flat``)
that checks a field belongs to its verb.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from reconciler.core.desired import Launch, Runtime
from reconciler.core.positional import by_position

#: Frozen values without a weakref slot (nothing holds one weakly): ``core/positional``
#: builds them by position only then.
frozen = attrs.frozen(kw_only=True, weakref_slot=False)


# ---------------------------------------------------------------- plan


@frozen
class PlanContext:
    """Run-time inputs of ``plan()`` that are not manifests, observations or memory.

    ``environ`` is the reconciler's own environment (for env passthrough) and
    ``data_root`` the resolved instance directory root: with them the planner
    computes each managed role's ``Launch`` and digest without any IO.
    """

    allow_empty: bool = False
    operator_starts: frozenset[str] = frozenset()  # roles named by `reconcile start`
    environ: tuple[tuple[str, str], ...] = ()
    data_root: str = "/var/lib/reconciler/instances"



class Status(enum.StrEnum):
    """BEHAVIOUR §4 statuses (what a role *is*, not what we will do)."""

    LOADED = "loaded"
    STARTING = "starting"
    LOADING = "loading"
    RUNNING = "running"
    DEGRADED = "degraded"
    EXITED = "exited"
    BACKOFF = "backoff"
    GAVE_UP = "gave-up"
    STOPPED_EXPOSED = "stopped-exposed"
    UNPLACEABLE = "unplaceable"
    REFUSED = "refused"
    STOPPED = "stopped"
    UNKNOWN = "unknown"
    FETCHING = "fetching"  # §1.6 waiting for its Model's files to arrive


#: Statuses after which a role needs an operator (exit code 3 of --once).
NEEDS_OPERATOR = frozenset(
    {Status.GAVE_UP, Status.STOPPED_EXPOSED, Status.UNPLACEABLE, Status.REFUSED}
)


class Verb(enum.StrEnum):
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    LOAD = "load"
    UNLOAD = "unload"
    KEEP = "keep"
    WAIT = "wait"
    GIVE_UP = "give-up"
    REFUSE = "refuse"
    FORGET = "forget"
    FETCH = "fetch"  # §1.6 a Model's files are downloaded (a ``Fetch`` of ``Plan.fetches``)


#: Verbs that change the world; the rest are decisions to do nothing.
ACTING_VERBS = frozenset({Verb.START, Verb.STOP, Verb.RESTART, Verb.LOAD, Verb.UNLOAD})


class Reason(enum.StrEnum):
    MISSING = "missing"
    SPEC_CHANGED = "spec_changed"
    CRASHED = "crashed"
    EVICTED = "evicted"  # Ollama model left /api/ps behind our back; §9 stopped for another
    STATE_STOPPED = "state_stopped"
    REMOVED = "removed"
    EXPOSED = "exposed"
    IN_SYNC = "in_sync"
    LOADING = "loading"
    STARTING = "starting"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"  # probe timed out: unknown is not down
    UNRESPONSIVE = "unresponsive"  # §4.1: alive, failing `failures` liveness checks in a row
    BACKOFF = "backoff"
    MAX_RESTARTS = "max_restarts"
    TERMINAL = "terminal"  # gave-up / stopped-exposed held until operator start
    PORT_TAKEN = "port_taken"
    PORT_NOT_ALLOWED = "port_not_allowed"
    MODEL_UNVERIFIED = "model_unverified"
    PROGRAM_UNVERIFIED = "program_unverified"  # §14 a Program file differs from its digest
    VERSION_MISMATCH = "version_mismatch"  # §14 the server runs another build than its Program
    NOT_PULLED = "not_pulled"  # Ollama tag not in /api/tags: we never pull
    UNPLACEABLE = "unplaceable"
    EXCLUDED = "excluded"
    EMPTY_MANIFESTS = "empty_manifests"
    ADOPTED = "adopted"  # observe only
    ABSENT = "absent"  # stopped and not running: nothing to do
    DEMAND = "demand"  # §9 an on-demand role with requests waiting is started
    IDLE = "idle"  # §9 an on-demand role with no request for idle_after is stopped
    ON_DEMAND = "on_demand"  # §9 an on-demand role nobody asks for stays stopped
    ORPHAN = "orphan"  # a server of ours by proof that no role wants (§4)
    ROLLOUT = "rollout"  # §13 kept at the revision it runs: its turn has not come (or it rolled back)
    STARTUP_TIMEOUT = "startup_timeout"  # never answered within startup_grace: a failed start
    OVER_RESERVED = "over_reserved"  # §7.1 uses more device memory than it reserved: degraded
    FETCHING = "fetching"  # §1.6 its Model is being fetched (or is about to be)
    NO_DISK = "no_disk"  # §1.6 the fetch would leave less than min_free
    NO_FETCH = "no_fetch"  # §1.6 the Model has a source, this node does not fetch
    FETCH_FAILED = "fetch_failed"  # §1.6 the bytes did not match: a new generation or --retry
    SCALE_UP = "scale_up"  # §12 a new instance of a role whose replicas grew
    SCALE_DOWN = "scale_down"  # §12 an instance beyond the role's replicas is stopped
    ROLLING_UPDATE = "rolling_update"  # §12 a new generation waits: one instance at a time


# ---------------------------------------------------------------- what each verb carries
#
# A decision's verb is its payload's: each verb carries what it needs and
# nothing else, so a stop without the process it signals, a load without its
# tag or a keep with a launch cannot be built. The executor, the recorder and
# the renderer ``match`` on the payload (docs/architecture.md: adding a verb).


@frozen
class Target:
    """§4 the owned process a stop signals: proven ours again (pid, create time, marker)
    before every signal. Also a kept server's process (§7.1 its device use, by pid)."""

    pid: int
    create_time: float
    owner_id: str  # the marker the process carries: the instance that started it


@frozen
class Start:
    """Spawn the role's server: its launch (None until placement picks a claim's devices:
    the executor refuses a start without one), what it runs, the host bytes it reserves."""

    verb: ClassVar[Verb] = Verb.START
    launch: Launch | None
    reserve: int = 0
    generation: str | None = None  # what it runs (§4 generations)
    restarted_at: str | None = None  # that generation's spec.restarted_at


@frozen
class Restart:
    """Stop ``replaces`` (None: it crashed, nothing is left to stop), then spawn the launch."""

    verb: ClassVar[Verb] = Verb.RESTART
    launch: Launch | None
    replaces: Target | None
    reserve: int = 0
    generation: str | None = None
    restarted_at: str | None = None


@frozen
class Stop:
    """Stop our own server: SIGTERM, grace, SIGKILL, ownership asked before each signal."""

    verb: ClassVar[Verb] = Verb.STOP
    target: Target


@frozen
class Load:
    """§2 load ``tag`` on a shared server (Ollama) and set its keep-alive (None: the node's)."""

    verb: ClassVar[Verb] = Verb.LOAD
    tag: str
    keep_alive: float | None = None
    reserve: int = 0
    generation: str | None = None
    restarted_at: str | None = None


@frozen
class Unload:
    """§2 unload ``tag``: only a model we loaded (``ownership.loaded_by_us``)."""

    verb: ClassVar[Verb] = Verb.UNLOAD
    tag: str


@frozen
class Keep:
    """Nothing to do; ``running``: our live process, if any (what it uses is observed by pid)."""

    verb: ClassVar[Verb] = Verb.KEEP
    running: Target | None = None


@frozen
class Wait:
    """Nothing yet (a backoff, a fetch, room); the decision's ``retry_in`` says when to look."""

    verb: ClassVar[Verb] = Verb.WAIT
    running: Target | None = None  # a live server whose restart waits keeps running


@frozen
class Refuse:
    """Not done, and why (the reason); a refused restart leaves ``running`` as it is."""

    verb: ClassVar[Verb] = Verb.REFUSE
    running: Target | None = None


@frozen
class GiveUp:
    """§4 max restarts reached: terminal ``gave-up`` until an operator start."""

    verb: ClassVar[Verb] = Verb.GIVE_UP


@frozen
class Forget:
    """Drop the role's record: nothing of it is left to remember."""

    verb: ClassVar[Verb] = Verb.FORGET


#: What a decision carries, by verb: one class per verb.
Act = Start | Restart | Stop | Load | Unload | Keep | Wait | Refuse | GiveUp | Forget
#: Payloads that spawn a launch (start, restart).
Launching = Start | Restart
#: Payloads that claim memory in the ledger (their ``reserve``).
Claiming = Start | Restart | Load
#: Payloads that name the live process they leave running or stop.
_PROCESS_OF = {Stop: "target", Restart: "replaces", Keep: "running", Wait: "running",
               Refuse: "running"}


def _verb_of(decision: Decision) -> Verb:
    return decision.act.verb


@frozen
class Decision:
    """One decision about one role, with the reason for it.

    ``act`` is what the executor does (its class is the verb) with what that
    verb needs; ``status``/``detail`` say what the role *is* now, for
    ``status``; ``reason``/``why`` say why this verb, for the plan diff.
    """

    role: str
    act: Act
    reason: Reason
    why: str = ""  # human detail for the reason: "ctx 4096 → 8192"
    status: Status = Status.UNKNOWN
    detail: str = ""  # one-line status detail
    runtime: Runtime | None = None
    port: int | None = None
    host: str | None = None  # serve host for start's port check and Ollama calls
    instance_id: str | None = None
    release: int = 0  # bytes released once the action completes
    retry_in: float | None = None  # seconds: backoff wait or requeue hint
    restarts: int = 0  # restart count after this decision
    #: (device id, bytes) a start/restart reserves on devices; what a kept server holds.
    devices: tuple[tuple[str, int], ...] = ()
    #: The payload's verb: never given, always its ``act``'s (a slot, not a property: the
    #: ledger and the execution order read it several times per decision per pass).
    verb: Verb = attrs.field(init=False, default=attrs.Factory(_verb_of, takes_self=True))

    def placed(self, devices: tuple[tuple[str, int], ...], act: Act) -> Decision:
        """This decision with its devices (and its launch, in ``act``) placed (§7.1).

        ``attrs.evolve`` spelled out (through ``decided``): placement places every claim of
        every pass. A test keeps it whole (``tests/plan/test_payloads.py``: every other
        field is kept).
        """
        return decided(self.role, act, self.reason, self.why, self.status, self.detail,
                       self.runtime, self.port, self.host, self.instance_id, self.release,
                       self.retry_in, self.restarts, devices)

    @property
    def acts(self) -> bool:
        return self.act.verb in ACTING_VERBS

    # Read-only views of the payload, by the names of the flat record this replaced
    # (None / 0 where the verb does not carry it).
    @property
    def process(self) -> Target | None:
        """The live process the decision stops, replaces or leaves running."""
        field = _PROCESS_OF.get(type(self.act))
        return getattr(self.act, field) if field is not None else None

    @property
    def pid(self) -> int | None:
        target = self.process
        return target.pid if target is not None else None

    @property
    def create_time(self) -> float | None:
        target = self.process
        return target.create_time if target is not None else None

    @property
    def owner_id(self) -> str | None:
        target = self.process
        return target.owner_id if target is not None else None

    @property
    def launch(self) -> Launch | None:
        return getattr(self.act, "launch", None)

    @property
    def reserve(self) -> int:
        return getattr(self.act, "reserve", 0)

    @property
    def generation(self) -> str | None:
        return getattr(self.act, "generation", None)

    @property
    def restarted_at(self) -> str | None:
        return getattr(self.act, "restarted_at", None)

    @property
    def model_tag(self) -> str | None:
        return getattr(self.act, "tag", None)

    @property
    def keep_alive(self) -> float | None:
        return getattr(self.act, "keep_alive", None)


#: ``Decision(role=…, act=…, …)`` by position, every field given in the fields' order: the
#: planner's maker (a decision per role per pass, and a placed claim's; ``core/positional``).
decided = by_position(Decision, verb="act.verb")


#: The fields of a flat decision each payload carries (``flat``).
_CARRIES: dict[type, tuple[str, ...]] = {
    Start: ("launch", "reserve", "generation", "restarted_at"),
    Restart: ("launch", "reserve", "generation", "restarted_at"),
    Load: ("model_tag", "keep_alive", "reserve", "generation", "restarted_at"),
    Unload: ("model_tag",), Stop: (), Keep: (), Wait: (), Refuse: (), GiveUp: (), Forget: (),
}
ACT_OF: dict[Verb, type] = {cls.verb: cls for cls in _CARRIES}  # type: ignore[attr-defined]
_PAYLOAD_NAME = {"model_tag": "tag"}


def act_of(verb: Verb, *, pid: int | None = None, create_time: float | None = None,
           owner_id: str | None = None, instance_id: str | None = None, **fields) -> Act:
    """The payload of ``verb`` from the flat fields (those of the record ``Decision`` was).

    A field the verb does not carry, set to anything but its empty value, is a
    ``TypeError``: an impossible combination is refused, not dropped. The live
    process (pid, create_time, owner_id) goes where the verb names it; a stop
    without one cannot be built.
    """
    cls = ACT_OF[verb]
    carried = _CARRIES[cls]
    stray = sorted(k for k, v in fields.items() if k not in carried and v not in (None, 0))
    if stray:
        raise TypeError(f"a {verb} decision carries no {', '.join(stray)}")
    kw = {_PAYLOAD_NAME.get(k, k): v for k, v in fields.items() if k in carried}
    field = _PROCESS_OF.get(cls)
    if field is not None:
        target = None
        if pid is not None:
            if create_time is None:
                raise TypeError(f"a {verb} decision's pid {pid} has no create time")
            target = Target(pid=pid, create_time=create_time,
                            owner_id=owner_id or instance_id or "")
        elif cls is Stop:
            raise TypeError("a stop decision needs the pid it targets")
        kw[field] = target
    elif pid is not None:
        raise TypeError(f"a {verb} decision targets no pid")
    if cls in (Start, Restart) and "launch" not in kw:
        kw["launch"] = None
    return cls(**kw)


def flat(*, role: str, verb: Verb, reason: Reason, why: str = "", status: Status = Status.UNKNOWN,
         detail: str = "", runtime: Runtime | None = None, port: int | None = None,
         host: str | None = None, instance_id: str | None = None, release: int = 0,
         retry_in: float | None = None, restarts: int = 0,
         devices: tuple[tuple[str, int], ...] = (), **fields) -> Decision:
    """A decision spelled as the flat record it was (tests, tools): the verb's payload is
    built from the fields (``act_of``), so an impossible combination is refused here too."""
    return Decision(role=role, act=act_of(verb, instance_id=instance_id, **fields),
                    reason=reason, why=why, status=status, detail=detail, runtime=runtime,
                    port=port, host=host, instance_id=instance_id, release=release,
                    retry_in=retry_in, restarts=restarts, devices=devices)


@frozen
class Fetch:
    """§1.6 a Model to download on this node: ``> fetch qwen 4.4 GB (missing on this node; …)``.

    Not a role's decision: one Model may be waited for by several roles, each of
    which is ``fetching``. A fetch reserves no memory.
    """

    model: str
    generation: str  # the digest of its file list (what the state store records)
    bytes: int  # still to download
    free: int | None  # bytes free in the cache now
    verb: Verb = Verb.FETCH
    reason: Reason = Reason.MISSING
    why: str = ""


@frozen
class Plan:
    decisions: tuple[Decision, ...] = ()  # in execution order
    requeue_after: float | None = None  # earliest retry_in: "look again then"
    fetches: tuple[Fetch, ...] = ()  # §1.6 started before the decisions are applied

    @property
    def changes(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.acts)

    def decision(self, role: str) -> Decision | None:
        return next((d for d in self.decisions if d.role == role), None)
