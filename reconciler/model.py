"""Value types shared by every layer (PURE: no IO, no clock).

Three families of values meet in ``plan()``:

* **Desired** — what the manifests say (``ModelSpec``, ``RoleSpec``,
  ``NodeConfig``), produced by ``manifests.py``.
* **Observed** — what the observer saw this pass (``ProcessFacts``,
  ``ProbeFacts``, ``RoleObservation``), produced by ``observe.py``.
* **Remembered** — what the state store knows from earlier passes
  (``RoleRecord``), produced by ``store.py``.

``plan()`` turns them into ``Decision`` values (one per role, each with a
reason), which ``execute.py`` applies.  Every value is a frozen attrs class;
collections inside are tuples or frozensets so values hash and compare.
"""

from __future__ import annotations

import enum
from typing import Iterable

import attrs

frozen = attrs.frozen(kw_only=True)


# ---------------------------------------------------------------- enums


class Runtime(enum.StrEnum):
    LLAMACPP = "llamacpp"
    MLX_LM = "mlx-lm"
    OLLAMA = "ollama"


class Mode(enum.StrEnum):
    MANAGED = "managed"
    ADOPTED = "adopted"


class WantedState(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"


class ModelFormat(enum.StrEnum):
    GGUF = "gguf"
    MLX = "mlx"
    SAFETENSORS = "safetensors"
    OLLAMA = "ollama"


#: Which model formats each runtime can load (BEHAVIOUR §1.5).
LOADABLE_FORMATS: dict[Runtime, frozenset[ModelFormat]] = {
    Runtime.LLAMACPP: frozenset({ModelFormat.GGUF}),
    Runtime.MLX_LM: frozenset({ModelFormat.MLX, ModelFormat.SAFETENSORS}),
    Runtime.OLLAMA: frozenset({ModelFormat.OLLAMA}),
}

#: Ollama listens here unless the manifest says otherwise.
OLLAMA_DEFAULT_PORT = 11434


# ---------------------------------------------------------------- desired


@frozen
class SourceRef:
    """Where a document (or a value inside it) was written: for messages."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@frozen
class ModelFile:
    """One file of a model, relative to the model's root."""

    path: str
    sha256: str
    size: int | None = None  # tokenizer/template files may omit the size


@frozen
class ModelSourceInfo:
    hf_repo: str | None = None
    hf_revision: str | None = None
    ollama_tag: str | None = None


@frozen
class ModelSpec:
    """A ``kind: Model`` document: the only source of weight paths."""

    name: str
    format: ModelFormat
    root: str | None = None  # absolute; None for ollama
    shards: tuple[ModelFile, ...] = ()
    tokenizer: ModelFile | None = None
    template: ModelFile | None = None
    source: ModelSourceInfo = ModelSourceInfo()
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    @property
    def files(self) -> tuple[ModelFile, ...]:
        """Every file that must verify before the model may be served."""
        extra = tuple(f for f in (self.tokenizer, self.template) if f is not None)
        return self.shards + extra

    @property
    def weights_size(self) -> int:
        return sum(s.size or 0 for s in self.shards)

    @property
    def ollama_tag(self) -> str | None:
        return self.source.ollama_tag


@frozen
class RestartPolicy:
    """BEHAVIOUR §4. Durations in seconds."""

    max_restarts: int = 5
    base: float = 2.0
    cap: float = 60.0
    stable_after: float = 60.0


@frozen
class ServeSpec:
    host: str = "127.0.0.1"
    port: int = 0
    ctx: int | None = None
    kv_quant: str | None = None
    draft_model: str | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@frozen
class MemorySpec:
    """Bytes. ``weights`` is already defaulted to the model's shard sizes."""

    weights: int = 0
    kv: int = 0

    @property
    def footprint(self) -> int:
        return self.weights + self.kv


@frozen
class RoleSpec:
    """A ``kind: InferenceSpec`` document: one server role.

    Defaults from NodeConfig (restart policy, keep_alive) are already merged
    in by the loader, so the planner reads one place.
    """

    name: str
    runtime: Runtime
    mode: Mode
    model: str | None = None
    state: WantedState = WantedState.RUNNING
    serve: ServeSpec = ServeSpec()
    memory: MemorySpec = MemorySpec()
    excludes: frozenset[str] = frozenset()  # role names, `role:` prefix removed
    restart: RestartPolicy = RestartPolicy()
    keep_alive: float | None = None  # seconds, Ollama only; negative = forever
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    @property
    def managed(self) -> bool:
        return self.mode is Mode.MANAGED

    @property
    def wanted(self) -> bool:
        return self.state is WantedState.RUNNING


@frozen
class PortRange:
    start: int
    end: int  # inclusive

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.start <= port <= self.end

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"


@frozen
class RunAs:
    uid: int
    gid: int


@frozen
class NodeConfig:
    """The single ``kind: NodeConfig`` document; every field has a default."""

    allowed_ports: PortRange | None = None  # None = any port (warned)
    memory_budget: int | None = None  # bytes; None = no budget
    serve_programs: tuple[tuple[Runtime, str], ...] = ()
    version_probe: tuple[tuple[Runtime, tuple[str, ...]], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    env_passthrough: tuple[str, ...] = ("HOME", "PATH")
    run_as: RunAs | None = None
    restart: RestartPolicy = RestartPolicy()
    keep_alive: float = 1800.0
    probe_timeout: float = 2.0
    deep_timeout: float = 300.0
    stop_grace: float = 5.0
    data_root: str | None = None  # None = <state dir>/instances
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    def serve_program(self, runtime: Runtime) -> str | None:
        return dict(self.serve_programs).get(runtime)

    def port_allowed(self, port: int) -> bool:
        return self.allowed_ports is None or port in self.allowed_ports


@frozen
class Desired:
    """The whole validated manifest set."""

    roles: tuple[RoleSpec, ...] = ()  # sorted by name
    models: tuple[ModelSpec, ...] = ()  # sorted by name
    node: NodeConfig = NodeConfig()

    def role(self, name: str) -> RoleSpec | None:
        return next((r for r in self.roles if r.name == name), None)

    def model(self, name: str | None) -> ModelSpec | None:
        return next((m for m in self.models if m.name == name), None)


# ---------------------------------------------------------------- launch


@frozen
class Launch:
    """The canonical launch of a managed server (BEHAVIOUR §3, §6).

    ``digest`` covers argv, env, cwd and run_as: a change there is a restart;
    anything else (memory figures, excludes, restart policy) is not.
    """

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str
    run_as: RunAs | None
    digest: str


# ---------------------------------------------------------------- observed


class Health(enum.StrEnum):
    UP = "up"  # answering and healthy
    LOADING = "loading"  # 503 loading / Ollama load in flight / ps timed out
    UNHEALTHY = "unhealthy"  # answering but unhealthy (e.g. mlx 503 thread died)
    UNREACHABLE = "unreachable"  # refused, timed out, transport error
    NOT_PROBED = "not-probed"  # port outside the allowlist: no packet sent


@frozen
class ProcessFacts:
    """A process the store says we started, as seen in the process table."""

    pid: int
    create_time: float
    alive: bool
    owned: bool  # pid + create time + RECONCILER_INSTANCE marker all match
    listen: tuple[str, ...] = ()  # "host:port" of the process group's listeners
    exit_observed_at: float | None = None


@frozen
class ProbeFacts:
    health: Health
    detail: str = ""
    listed_models: tuple[str, ...] = ()  # /v1/models ids, /api/tags names
    resident_models: tuple[str, ...] = ()  # Ollama /api/ps names
    identity: str | None = None  # /props model_path, argv --model, …
    version: str | None = None
    latency: float | None = None  # seconds


@frozen
class RoleObservation:
    """Everything observed about one role (desired or remembered) this pass."""

    name: str
    process: ProcessFacts | None = None
    probe: ProbeFacts | None = None
    port_taken: bool = False  # something not ours accepts connections on the port
    exposed: tuple[str, ...] = ()  # non-loopback listen addresses of our process


class ModelState(enum.StrEnum):
    VERIFIED = "verified"
    UNVERIFIED = "unverified"  # not checked yet (e.g. plan-only run)
    MISMATCH = "mismatch"  # sticky until a full verification passes
    MISSING = "missing"
    DETACHED = "detached"  # the root is gone (unmounted drive)


@frozen
class ModelCheck:
    name: str
    state: ModelState
    detail: str = ""


@frozen
class Observed:
    roles: tuple[RoleObservation, ...] = ()
    models: tuple[ModelCheck, ...] = ()

    def role(self, name: str) -> RoleObservation:
        found = next((r for r in self.roles if r.name == name), None)
        return found if found is not None else RoleObservation(name=name)

    def model(self, name: str | None) -> ModelCheck | None:
        return next((m for m in self.models if m.name == name), None)


# ---------------------------------------------------------------- remembered


class Terminal(enum.StrEnum):
    GAVE_UP = "gave-up"
    STOPPED_EXPOSED = "stopped-exposed"


@frozen
class RoleRecord:
    """What the state store remembers about one role between passes."""

    name: str
    instance_id: str
    runtime: Runtime
    mode: Mode
    host: str = "127.0.0.1"
    port: int = 0
    model_tag: str | None = None  # the Ollama tag we loaded, for unload
    pid: int | None = None
    create_time: float | None = None
    launch_digest: str | None = None
    launch_argv: tuple[str, ...] = ()  # for "spec_changed: ctx 4096 → 8192"
    restarts: int = 0
    started_at: float | None = None
    exited_at: float | None = None  # when the exit was first observed
    healthy_since: float | None = None  # first answered since the last start
    terminal: Terminal | None = None
    terminal_detail: str = ""
    we_loaded: bool = False
    reserved: int = 0  # bytes held in the residency ledger


@frozen
class Remembered:
    roles: tuple[RoleRecord, ...] = ()

    def role(self, name: str) -> RoleRecord | None:
        return next((r for r in self.roles if r.name == name), None)


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


#: Verbs that change the world; the rest are decisions to do nothing.
ACTING_VERBS = frozenset({Verb.START, Verb.STOP, Verb.RESTART, Verb.LOAD, Verb.UNLOAD})


class Reason(enum.StrEnum):
    MISSING = "missing"
    SPEC_CHANGED = "spec_changed"
    CRASHED = "crashed"
    EVICTED = "evicted"  # Ollama model left /api/ps behind our back
    STATE_STOPPED = "state_stopped"
    REMOVED = "removed"
    EXPOSED = "exposed"
    IN_SYNC = "in_sync"
    LOADING = "loading"
    STARTING = "starting"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"  # probe timed out: unknown is not down
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

    @property
    def acts(self) -> bool:
        return self.verb in ACTING_VERBS


@frozen
class Plan:
    decisions: tuple[Decision, ...] = ()  # in execution order
    requeue_after: float | None = None  # earliest retry_in: "look again then"

    @property
    def changes(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.acts)

    def decision(self, role: str) -> Decision | None:
        return next((d for d in self.decisions if d.role == role), None)


def sorted_by_name(items: Iterable) -> tuple:
    return tuple(sorted(items, key=lambda x: x.name))
