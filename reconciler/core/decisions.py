"""Value types of a plan (PURE): decisions with reasons, statuses, verbs.

``plan()`` turns desired, observed and remembered values into a ``Plan``: one
``Decision`` per role saying what the executor does (its ``Verb``) and why
(its ``Reason``), and what the role *is* now (its ``Status``).
"""

from __future__ import annotations

import enum

import attrs

from reconciler.core.desired import Launch, Runtime

frozen = attrs.frozen(kw_only=True)


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
    STARTUP_TIMEOUT = "startup_timeout"  # never answered within startup_grace: a failed start
    OVER_RESERVED = "over_reserved"  # §7.1 uses more device memory than it reserved: degraded
    FETCHING = "fetching"  # §1.6 its Model is being fetched (or is about to be)
    NO_DISK = "no_disk"  # §1.6 the fetch would leave less than min_free
    NO_FETCH = "no_fetch"  # §1.6 the Model has a source, this node does not fetch
    FETCH_FAILED = "fetch_failed"  # §1.6 the bytes did not match: a new generation or --retry


@frozen
class Decision:
    """One decision about one role, with the reason for it.

    ``verb`` says what the executor does (or that it does nothing);
    ``status``/``detail`` say what the role *is* now, for ``status``;
    ``reason``/``why`` say why this verb, for the plan diff.
    """

    role: str
    verb: Verb
    reason: Reason
    why: str = ""  # human detail for the reason: "ctx 4096 → 8192"
    status: Status = Status.UNKNOWN
    detail: str = ""  # one-line status detail
    runtime: Runtime | None = None
    port: int | None = None
    pid: int | None = None  # the owned pid a stop/restart targets
    owner_id: str | None = None  # the marker that pid carries (the instance that started it)
    create_time: float | None = None  # that pid's recorded create time (ownership re-check)
    host: str | None = None  # serve host for start's port check and Ollama calls
    instance_id: str | None = None
    launch: Launch | None = None  # for start/restart
    model_tag: str | None = None  # for load/unload
    keep_alive: float | None = None  # for load
    reserve: int = 0  # bytes this action reserves (start/restart/load)
    release: int = 0  # bytes released once the action completes
    retry_in: float | None = None  # seconds: backoff wait or requeue hint
    restarts: int = 0  # restart count after this decision
    generation: str | None = None  # what a start/restart/load runs (§4 generations)
    restarted_at: str | None = None  # that generation's spec.restarted_at
    #: (device id, bytes) a start/restart reserves on devices; what a kept server holds.
    devices: tuple[tuple[str, int], ...] = ()

    @property
    def acts(self) -> bool:
        return self.verb in ACTING_VERBS


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
