"""Value types of what is (PURE): observations of this pass and the store's memory.

``observe.py`` fills ``Observed`` (process and probe facts per role, model
checks); ``store.py`` fills ``Remembered`` (one ``RoleRecord`` per role the
reconciler has started, loaded or adopted). With ``model.Desired`` they are
the inputs of ``plan()``.

A ``RoleRecord`` holds what the role is in typed parts, as a ``Decision``
carries its verb's payload: ``process`` (``ServerProcess``) only while it names
a server we started, ``load`` (``LoadedModel``) only for a role a load was
decided for, ``intent`` only while an action is in flight; so a create time
without its pid, or a load of ours without its tag, cannot be built.

Size: the two value families a pass reads (the look of this pass, the store's
memory), each with the small typed parts its records are made of.
"""

from __future__ import annotations

import enum

import attrs

from reconciler.core.demand import Demand
from reconciler.core.desired import Mode, Runtime
from reconciler.core.devices import DeviceUse, FoundDevice

frozen = attrs.frozen(kw_only=True)


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
class Progress:
    """A server's own work counters (§4.1 *no progress*), e.g. llama.cpp's ``/metrics``."""

    in_flight: float  # requests being processed now
    decoded: float  # a counter that moves while they are: llama.cpp's n_decode_total


@frozen
class ProbeFacts:
    """What the probes of one role found (``runtimes/`` read the answers into it)."""

    health: Health
    detail: str = ""
    #: Unreachable right after our start: ``starting``, not ``unknown`` (§4).
    starting: bool = False
    #: Unreachable because nothing answered within the timeout, not because the
    #: connection was refused: something may be there, hung (§4.1; unknown is not down).
    timed_out: bool = False
    #: The runtime's progress counters, when the role asks for them (§4.1).
    progress: Progress | None = None
    #: The progress request got no answer in time (its detail); "" otherwise.
    progress_timeout: str = ""
    listed_models: tuple[str, ...] = ()  # /v1/models ids, /api/tags names
    resident_models: tuple[str, ...] = ()  # Ollama /api/ps names
    identity: str | None = None  # /props model_path, argv --model, …
    version: str | None = None
    latency: float | None = None  # seconds


@frozen
class ExitInfo:
    """How a server of ours ended (§4: every exit says why); ``exitreasons.py`` words it.

    Linux gives a process's exit status to its parent alone: ``known`` is
    False for a server an earlier reconciler started (re-parented to init).
    """

    known: bool = False  # the exit status was read (the server was our child)
    #: Seen by a pass that records nothing (``status``, ``plan``): the reconciler that
    #: started the server (a running ``watch``) may still record its status, so this
    #: pass says "not recorded yet", never "unknown".
    pending: bool = False
    code: int | None = None  # its exit code, when it exited by itself
    signal: int | None = None  # the signal that ended it
    oom: str = ""  # the kernel's line about killing it for memory, when the kernel said so
    log: tuple[str, ...] = ()  # the last lines of its server.log


@frozen
class RoleObservation:
    """Everything observed about one role (desired or remembered) this pass."""

    name: str
    process: ProcessFacts | None = None
    probe: ProbeFacts | None = None
    port_taken: bool = False  # something not ours accepts connections on the port
    exposed: tuple[str, ...] = ()  # non-loopback listen addresses of our process
    exit: ExitInfo | None = None  # how our recorded server ended, when it is found gone


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
class Orphan:
    """A server of ours by proof that no role's record holds (§4 orphans).

    Proof: it carries an instance marker, leads its own process group, runs as
    the ``run_as`` uid (ours without one) and works in exactly
    ``<data_root>/<marker>`` of *this* node. No desired role re-adopts it.
    """

    pid: int
    create_time: float
    instance_id: str  # the marker it carries
    listen: tuple[str, ...] = ()  # "host:port" of its group's listeners, when read


class FetchState(enum.StrEnum):
    """Where a Model with a source stands on a node that fetches (§1.6)."""

    DONE = "done"  # every file verified in the cache and linked
    NEEDED = "needed"  # some file missing, nothing fetching it
    RUNNING = "running"  # a fetch process of ours is alive for this generation
    FAILED = "failed"  # this generation failed for good (mismatch, oversize): refused
    BACKOFF = "backoff"  # the last fetch failed (network, disk): tried again soon


@frozen
class FetchObservation:
    """A fetchable Model on this node: what is there, what is missing, what runs (§1.6)."""

    model: str
    generation: str  # the digest of the Model's file list
    state: FetchState
    total: int = 0  # bytes of every file
    missing: int = 0  # bytes not yet in the cache (partial files count as done)
    free: int | None = None  # bytes free on the cache's filesystem; None: unknown
    rate: float | None = None  # bytes per second while running
    detail: str = ""  # the failure, for FAILED
    pid: int | None = None


@frozen
class FetchRecord:
    """A fetch process the store remembers, written before it is spawned (intent first)."""

    model: str
    generation: str
    pid: int | None = None  # None: the intent, written before the spawn
    create_time: float | None = None
    started_at: float = 0.0
    state: str = "running"  # running | failed
    detail: str = ""
    done_at_start: int = 0  # bytes already in the cache when it started (for the rate)


@frozen
class Observed:
    roles: tuple[RoleObservation, ...] = ()
    models: tuple[ModelCheck, ...] = ()
    fetches: tuple[FetchObservation, ...] = ()  # §1.6 only on a node that fetches
    #: The router's counts at the start of the pass (§9); None outside the daemon.
    demand: Demand | None = None
    orphans: tuple[Orphan, ...] = ()
    #: The devices discovery found (None: not looked, or no tool to look with):
    #: a declared device missing or smaller here takes no new claim.
    devices: tuple[FoundDevice, ...] | None = None
    #: Device memory each process uses (NVML / nvidia-smi), when observed.
    device_use: tuple[DeviceUse, ...] = ()

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
class Liveness:
    """The liveness counters a record keeps between passes (§4.1; ``liveness.py``)."""

    failures: int = 0  # consecutive failed checks
    since: float | None = None  # the first failed check of this run of failures
    checked_at: float | None = None  # the last check counted (checks are a period apart)
    detail: str = ""  # what the last failed check found
    decoded: float | None = None  # progress: the decode counter last seen to move …
    decoded_at: float | None = None  # … and when


@frozen
class Intent:
    """What a pass was about to do to a role's server, written before doing it (§3).

    Written right before the first step that cannot be taken back (a signal,
    a spawn) and cleared when the pass records the outcome. A record that
    still holds one was left by a killed run: its server's exit was our own
    doing, not a crash, and the next pass finishes the work.
    """

    verb: str  # "start", "restart" or "stop"
    reason: str  # the decision's reason ("exposed", "spec_changed", …)
    instance_id: str  # what will run (start/restart) or what is stopped
    launch_digest: str | None = None  # of the launch about to be spawned
    port: int = 0
    at: float = 0.0
    stops: int | None = None  # the pid of our live server it signals (stop, restart)
    #: Until then a stopped server still alive may yet exit from our SIGTERM
    #: (its stop_grace and a margin): that exit is ours, not a crash.
    until: float = 0.0


@frozen
class ServerProcess:
    """The server we started, while the record holds it: its pid and the create time
    that proves that pid still ours (§3). They change together or not at all, so a
    create time without a pid cannot be recorded."""

    pid: int
    create_time: float | None = None


@frozen
class LoadedModel:
    """§2 the tag a load of ours put on a shared server (Ollama), kept to unload it.

    ``ours``: the model is resident by our own load, so ours to unload; False once
    it was unloaded, or resident again by a client's load (kept: the tag a changed
    spec must unload). No one can own a load without its tag.
    """

    tag: str
    ours: bool = False


@frozen
class RoleRecord:
    """What the state store remembers about one role between passes.

    What it holds follows what the role is: ``process`` only while it names a
    server we started (a role that loads models on a shared server never has
    one), ``load`` only for a role a load was decided for, ``intent`` only
    while an action is in flight (written before it, cleared after). The rest
    outlives any one server: the restart count, the backoff clock, the exit,
    a terminal hold, the generation, the reservation. The flat names
    (``pid``, ``create_time``, ``model_tag``, ``we_loaded``) read the parts;
    ``flat_record`` builds a record from them (tests, tools).
    """

    name: str
    instance_id: str
    runtime: Runtime
    mode: Mode
    host: str = "127.0.0.1"
    port: int = 0
    process: ServerProcess | None = None
    load: LoadedModel | None = None
    launch_digest: str | None = None
    launch_argv: tuple[str, ...] = ()  # for "spec_changed: ctx 4096 → 8192"
    restarts: int = 0
    started_at: float | None = None
    exited_at: float | None = None  # when the exit was first observed
    healthy_since: float | None = None  # first answered since the last start
    terminal: Terminal | None = None
    terminal_detail: str = ""
    reserved: int = 0  # bytes held in the residency ledger
    exit: ExitInfo | None = None  # how the last server ended (kept until the next start)
    liveness: Liveness = Liveness()  # §4.1 counters
    #: The generation (§4) of the last start, restart or load attempt: what the
    #: restart count, the backoff clock and a terminal hold belong to. None:
    #: recorded before generations (the launch digest stands in for it).
    generation: str | None = None
    restarted_at: str | None = None  # that generation's spec.restarted_at, for messages
    intent: Intent | None = None  # a pass's unfinished work (see ``Intent``)
    #: The devices of the last launch and the bytes reserved on each; held while
    #: the server is resident (running, or crashed and backing off).
    devices: tuple[tuple[str, int], ...] = ()

    # Read-only views of the parts, by the names of the flat record this replaced.
    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def create_time(self) -> float | None:
        return self.process.create_time if self.process is not None else None

    @property
    def model_tag(self) -> str | None:
        """The Ollama tag a load was decided for, for unload."""
        return self.load.tag if self.load is not None else None

    @property
    def we_loaded(self) -> bool:
        return self.load is not None and self.load.ours


def process_of(pid: int | None, create_time: float | None) -> ServerProcess | None:
    """The process part from its two columns: none without a pid (a create time alone
    names nothing: it is refused)."""
    if pid is None:
        if create_time is not None:
            raise TypeError(f"a create time ({create_time}) without a pid")
        return None
    return ServerProcess(pid=pid, create_time=create_time)


def load_of(model_tag: str | None, we_loaded: bool) -> LoadedModel | None:
    """The load part from its two columns: none without a tag (a load of ours
    without a tag is refused)."""
    if not model_tag:
        if we_loaded:
            raise TypeError("a load of ours without its tag")
        return None
    return LoadedModel(tag=model_tag, ours=we_loaded)


def flat_record(*, pid: int | None = None, create_time: float | None = None,
                model_tag: str | None = None, we_loaded: bool = False, **fields) -> RoleRecord:
    """A record spelled as the flat row it is stored as (tests, tools): the parts are
    built from the columns (``process_of``, ``load_of``), so an impossible
    combination is refused here too."""
    return RoleRecord(process=process_of(pid, create_time), load=load_of(model_tag, we_loaded),
                      **fields)


@frozen
class Remembered:
    roles: tuple[RoleRecord, ...] = ()

    def role(self, name: str) -> RoleRecord | None:
        return next((r for r in self.roles if r.name == name), None)
