"""Value types of the desired state (PURE: no IO, no clock).

What the manifests say — ``ModelSpec``, ``RoleSpec``, ``NodeConfig``, gathered
in ``Desired`` by ``manifests.py`` — and the ``Launch`` a managed role is
started with. Two sibling modules hold the other values that meet in
``plan()``: ``observed.py`` (what the observer saw and what the state store
remembers) and ``decisions.py`` (the plan: one ``Decision`` per role, with a
reason). Every value is a frozen attrs class; collections inside are tuples or
frozensets so values hash and compare.

Size: one frozen class (or enum) per manifest concept, 25 of them, the vocabulary the
planner reads as one; beside them only ``program_key``, ``is_program_path`` and
``sorted_by_name``. What a role's ``replicas`` make of it (instance names, instance
specs) is ``instances.py``.
"""

from __future__ import annotations

import enum
import hashlib
from typing import Iterable

import attrs

from reconciler.core.devices import Device, DeviceRequest
from reconciler.core.instances import group_of, replica_of

frozen = attrs.frozen(kw_only=True)
#: The values the planner keys its launches by (planner/launches.py) keep their hash:
#: a deep hash of a role declaration on every pass would cost more than the lookup saves.
keyed = attrs.frozen(kw_only=True, cache_hash=True)


# ---------------------------------------------------------------- enums


class Runtime(enum.StrEnum):
    """Which server a role runs on; what each can do is declared in ``runtimes/``."""

    LLAMACPP = "llamacpp"
    MLX_LM = "mlx-lm"
    OLLAMA = "ollama"
    OPENAI = "openai"


class Mode(enum.StrEnum):
    MANAGED = "managed"
    ADOPTED = "adopted"


class WantedState(enum.StrEnum):
    RUNNING = "running"  # always on
    STOPPED = "stopped"
    ON_DEMAND = "on-demand"  # started by a request through the router, stopped when idle (§9)


class ModelFormat(enum.StrEnum):
    GGUF = "gguf"
    MLX = "mlx"
    SAFETENSORS = "safetensors"
    OLLAMA = "ollama"


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
    url: str | None = None  # where to fetch it from (an https URL), when not the Hub
    repo_path: str | None = None  # its path in the Model's Hub repository (default ``path``)


@frozen
class ModelSourceInfo:
    hf_repo: str | None = None  # informative: where a hand-placed copy came from
    hf_revision: str | None = None
    ollama_tag: str | None = None
    hf: str | None = None  # fetchable: the Hub repository ORG/REPO …
    revision: str | None = None  # … at this commit (40 hex: a branch or tag moves)


@keyed
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

    @property
    def fetchable(self) -> bool:
        """Every file has a source (a URL, or the Model's Hub repository at a commit)."""
        hub = self.source.hf is not None and self.source.revision is not None
        return bool(self.files) and all(f.url is not None or hub for f in self.files)

    def fetch_url(self, file: ModelFile, endpoint: str) -> str:
        """Where ``file`` is fetched from: its URL, or the Hub's resolve URL at the commit."""
        if file.url is not None:
            return file.url
        return (f"{endpoint.rstrip('/')}/{self.source.hf}/resolve/{self.source.revision}/"
                f"{file.repo_path or file.path}")

    def fetch_generation(self, endpoint: str) -> str:
        """The digest of what a fetch downloads (each file's source, digest, size): a new
        one is a new tree in the cache, so a role on the Model restarts once it is there."""
        text = "\n".join(f"{f.path}\t{self.fetch_url(f, endpoint)}\t{f.sha256}\t{f.size}"
                         for f in self.files)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@frozen
class ProgramSource:
    """A Program's release archive (BEHAVIOUR §14): fetched, verified, unpacked into the cache."""

    url: str
    sha256: str
    size: int
    strip: int = 0  # leading path components dropped from the archive's members


@keyed
class ProgramSpec:
    """A ``kind: Program`` document (BEHAVIOUR §14): the server program a role runs, by digest.

    ``files`` (``ModelFile``: path, sha256, size) lie under ``root``: where they are
    hashed in place, or, for a ``source``, the node's cache tree for it (set per node,
    as a fetched Model's root is). ``entrypoint`` is the executable, one of the files.
    """

    name: str
    runtime: Runtime
    version: str
    entrypoint: str
    files: tuple[ModelFile, ...]
    root: str | None = None  # absolute; None until a node that fetches gives it its cache tree
    source: ProgramSource | None = None
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    @property
    def executable(self) -> str | None:
        return f"{self.root.rstrip('/')}/{self.entrypoint}" if self.root else None

    @property
    def digest(self) -> str:
        """sha256 of the file list (path, size, digest): one text names the whole program."""
        text = "\n".join(f"{f.path}\t{f.size}\t{f.sha256}" for f in self.files)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def label(self) -> str:
        """``llama-b11434 b11434 sha256:79db67b7b9eb05e0``: name, version, the file list's digest."""
        return f"{document_name(self.name)} {self.version} sha256:{self.digest[:16]}"

    @property
    def entry_sha256(self) -> str:
        return next((f.sha256 for f in self.files if f.path == self.entrypoint), "")


def program_key(name: str) -> str:
    """§14 a Program among the Models' checks, stamps and sticky mismatches: ``program/<name>``
    (no Model name has a ``/``)."""
    return f"program/{name}"


#: §13 a Model or Program document a rollout keeps at an earlier commit for a role it holds
#: back, on a node where another role runs HEAD's document of that name:
#: ``<name>@<12 hex of the commit>`` (no document name has an '@', §1.2), so each role finds
#: its own. The server, the instance id and the router see ``document_name``: the same.
KEPT_MARK = "@"


def kept_name(name: str, commit: str) -> str:
    """``qwen@4f0e1a2b3c4d``: the name a kept document of ``commit`` goes by (§13)."""
    return f"{name}{KEPT_MARK}{commit[:12]}"


def document_name(name: str) -> str:
    """The document's own name: ``kept_name``'s mark removed (§13)."""
    return name.partition(KEPT_MARK)[0]


def is_program_path(value: str) -> bool:
    """``serve_programs`` / ``spec.program``: an absolute path (unpinned) or a Program name."""
    return value.startswith("/")


@frozen
class RestartPolicy:
    """BEHAVIOUR §4. Durations in seconds."""

    max_restarts: int = 5
    base: float = 2.0
    cap: float = 60.0
    stable_after: float = 60.0
    #: How long a started server may stay ``starting`` (alive, never answered)
    #: before that counts as a failed start (§4; Kubernetes' startupProbe).
    startup_grace: float = 120.0


@frozen
class LivenessSpec:
    """BEHAVIOUR §4.1, opt-in per role: how a live but hung server is told apart. Seconds.

    A check is made every ``period``; a request unanswered within ``timeout``
    (or, on llama.cpp with ``--metrics``, requests in flight with no decode
    progress for a whole period) fails it. ``failures`` consecutive failed
    checks make a managed server ``unresponsive``; none count before
    ``grace`` has passed since its process started.
    """

    period: float = 30.0
    timeout: float = 5.0
    failures: int = 3
    grace: float = 600.0


@frozen
class LoraRef:
    """One LoRA adapter of a role (``spec.serve.loras``): a Model name and its scale."""

    model: str
    scale: float = 1.0


@frozen
class RepoFile:
    """A file of the manifests repository that a flag reads (BEHAVIOUR §1.4).

    ``index``: the ``extra_args`` entry holding its path; ``path``: as written
    (relative to the manifest's directory). The server reads a copy in its
    instance directory (``copy``), whose name carries the content's digest, so
    an edit is a new launch and an unchanged file is not.
    """

    index: int
    path: str
    sha256: str
    data: bytes = attrs.field(eq=False, hash=False, repr=False)

    @property
    def copy(self) -> str:
        """Where the server reads it, relative to its instance directory."""
        base = self.path.rstrip("/").rsplit("/", 1)[-1]
        return f"files/{self.sha256[:16]}-{base}"


@frozen
class ServeSpec:
    host: str = "127.0.0.1"
    port: int = 0
    ctx: int | None = None
    kv_quant: str | None = None  # both caches; cache_type_k / _v override one each
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    draft_model: str | None = None
    mmproj: str | None = None  # a Model name (llama.cpp --mmproj)
    loras: tuple[LoraRef, ...] = ()  # llama.cpp --lora-scaled
    adapter: str | None = None  # a Model name (mlx-lm --adapter-path)
    api_key_file: str | None = None  # absolute, on the node; the key is read by the shell
    slot_save: bool = False  # llama.cpp --slot-save-path: a directory of the instance's own
    extra_args: tuple[str, ...] = ()
    files: tuple[RepoFile, ...] = ()  # the repository files extra_args name

    @property
    def weight_refs(self) -> tuple[str, ...]:
        """Every Model this role's server loads besides ``spec.model``."""
        names = [self.draft_model, self.mmproj, self.adapter, *(x.model for x in self.loras)]
        return tuple(n for n in names if n)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@frozen
class MemorySpec:
    """Bytes. ``weights`` is already defaulted to the model's shard sizes."""

    weights: int = 0
    kv: int = 0
    #: What a role placed on devices keeps in host RAM (CPU-offloaded experts,
    #: ``--n-cpu-moe``): counted against ``memory_budget``. Host-only roles
    #: count their whole footprint there instead.
    host: int = 0

    @property
    def footprint(self) -> int:
        return self.weights + self.kv


#: §9: an on-demand role with no request for this long (seconds) is stopped.
DEFAULT_IDLE_AFTER = 600.0


@keyed
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
    idle_after: float = DEFAULT_IDLE_AFTER  # seconds: an on-demand role with no request this long stops (§9)
    liveness: LivenessSpec | None = None  # §4.1: None = no liveness checks (opt-in)
    max_concurrency: int | None = None  # §9 requests the router forwards at once; None: any
    #: Any text; a new value starts a new generation (§4), like `kubectl rollout restart`.
    restarted_at: str | None = None
    #: ``spec.placement.devices``: the devices the footprint goes on (None: host-only).
    devices: DeviceRequest | None = None
    #: Names clients may send as ``model`` besides the role's (§9): any text.
    aliases: tuple[str, ...] = ()
    #: The server's own environment variables (names from its runtime's allowlist).
    env: tuple[tuple[str, str], ...] = ()
    #: §12 ``spec.replicas``: how many instances the role (its group) runs. Every instance
    #: spec carries it; its ``group`` and ``replica`` are read from its name (instance 0
    #: is named as the role, instance i ``role/i``: a role's own name has no ``/``).
    replicas: int = 1
    #: §12 ``placement.devices.shared_by_replicas``: instances of the group may share a device.
    shared_by_replicas: bool = False
    #: ``spec.program``: a Program name or an absolute path (§14); None: the node's serve_programs.
    program: str | None = None
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    @property
    def host_need(self) -> int:
        """Bytes against ``memory_budget``: ``memory.host`` on devices, else the footprint."""
        return self.memory.host if self.devices is not None else self.memory.footprint

    @property
    def managed(self) -> bool:
        return self.mode is Mode.MANAGED

    @property
    def group(self) -> str:
        """§12 the role this instance is of (its own name for a role without replicas)."""
        return group_of(self.name)

    @property
    def replica(self) -> int:
        """§12 this instance's index in its group (0 for a role without replicas)."""
        return replica_of(self.name)

    @property
    def wanted(self) -> bool:
        """Always on (``state: running``); an on-demand role is wanted only while demanded."""
        return self.state is WantedState.RUNNING

    @property
    def on_demand(self) -> bool:
        return self.state is WantedState.ON_DEMAND


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
class RouterConfig:
    """``NodeConfig.router`` (BEHAVIOUR §9): one OpenAI-compatible endpoint for the node's roles.

    ``listen`` is a loopback host and a port; sizes in bytes, durations in seconds.
    """

    host: str = "127.0.0.1"
    port: int = 0
    max_queue: int = 64  # waiting requests per role; more get 429
    queue_timeout: float = 300.0  # longer in the queue gets 504
    max_body: int = 32 * 2**20  # a larger request body gets 413
    api_key_file: str | None = None  # absolute; when set, `Authorization: Bearer <key>`
    api_keys_file: str | None = None  # absolute; lines `NAME:SHA256-OF-KEY`, a name per client
    cors_origins: tuple[str, ...] = ()  # origins a browser may call from (opt-in; `*`: any)
    max_connections: int = 1024  # client connections at once (also bounded by the fd budget)
    idle_timeout: float = 10.0  # a connection sends a whole request head within this
    body_timeout: float = 30.0  # and the body within this once the head is read
    drain_timeout: float = 30.0  # a role's requests in flight get this long before its stop
    min_residency: float = 5.0  # an on-demand role started is not evicted before this

    @property
    def listen(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@frozen
class StatusPageConfig:
    """``NodeConfig.status_page`` (BEHAVIOUR §11): the read-only status page on a loopback port."""

    host: str = "127.0.0.1"
    port: int = 0
    api_key_file: str | None = None  # absolute; when set, the page asks for the key

    @property
    def listen(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@frozen
class FetchConfig:
    """``NodeConfig.fetch`` (BEHAVIOUR §1.6): this node downloads Models that have a source.

    ``cache`` holds the files by sha256 (``blobs/<sha256>``) and each Model's tree of
    hard links (``models/<name>/<path>``); sizes in bytes.
    """

    cache: str = ""  # absolute
    max_parallel: int = 2  # files downloaded at once
    hf_endpoint: str = "https://huggingface.co"
    hf_token_file: str | None = None  # absolute; its text is sent only to hf_endpoint's host
    min_free: int = 10 * 2**30  # left free on the cache's filesystem after every fetch


@frozen
class NodeConfig:
    """A ``kind: NodeConfig`` document: one node of the fleet; every field has a default."""

    name: str = ""  # metadata.name: the node's name ("" when no NodeConfig was given)
    labels: tuple[tuple[str, str], ...] = ()  # metadata.labels, sorted (BEHAVIOUR §10)
    model_roots: tuple[tuple[str, str], ...] = ()  # Model name → its root on this node
    allowed_ports: PortRange | None = None  # None = any port (warned)
    memory_budget: int | None = None  # bytes; None = no budget
    serve_programs: tuple[tuple[Runtime, str], ...] = ()  # an absolute path or a Program name
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
    router: RouterConfig | None = None  # None: no router on this node (§9)
    status_page: StatusPageConfig | None = None  # None: the page only on the router's port (§11)
    devices: tuple[Device, ...] = ()  # accelerators the planner may place roles on, by id
    fetch: FetchConfig | None = None  # None: this node never downloads (§1.6)
    ref: SourceRef | None = attrs.field(default=None, eq=False)

    def serve_program(self, runtime: Runtime) -> str | None:
        return dict(self.serve_programs).get(runtime)

    def port_allowed(self, port: int) -> bool:
        return self.allowed_ports is None or port in self.allowed_ports

    def device(self, device_id: str) -> Device | None:
        return next((d for d in self.devices if d.id == device_id), None)


@frozen
class Desired:
    """What the validated manifest set asks of this node (BEHAVIOUR §10: its share).

    ``roles`` are the roles placed on this node, with its defaults merged in;
    ``placed_elsewhere`` names every other role of the set with the nodes it
    is placed on (none: it matches no node), so that a role this node still
    runs is stopped as placed elsewhere, and a set whose roles all live on
    other nodes is not mistaken for an empty one.
    """

    roles: tuple[RoleSpec, ...] = ()  # sorted by name
    models: tuple[ModelSpec, ...] = ()  # sorted by name; roots as this node has them
    node: NodeConfig = NodeConfig()
    placed_elsewhere: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (role, its nodes), by role
    programs: tuple[ProgramSpec, ...] = ()  # sorted by name; roots as this node has them (§14)

    def program_for(self, role: RoleSpec) -> ProgramSpec | None:
        """The Program a role runs (its ``spec.program``, else the node's), None for a path."""
        name = role.program or self.node.serve_program(role.runtime)
        if name is None or is_program_path(name):
            return None
        return next((p for p in self.programs if p.name == name), None)

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
    #: ``(path relative to cwd, content)``: repository files copied in at start.
    files: tuple[tuple[str, bytes], ...] = attrs.field(default=(), eq=False, repr=False)
    #: Directories relative to cwd the server writes into, made (owned by run_as) at start.
    dirs: tuple[str, ...] = ()


def sorted_by_name(items: Iterable) -> tuple:
    return tuple(sorted(items, key=lambda x: x.name))
