"""Hypothesis strategies for planner inputs: manifests, observations, memory (test helper).

Worlds are small (≤ 5 roles named a–e) so shrinking stays readable. Ports of
non-Ollama roles are distinct (the manifest validator refuses duplicates);
port 9000 lies outside the allowlist on purpose, to exercise the planner's own
guard. All Ollama roles share one server on port 8086 and see the same probe.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from reconciler.planner import identity
from reconciler.runtimes import spec_of
from reconciler.core.decisions import PlanContext
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    NodeConfig,
    PortRange,
    RestartPolicy,
    RoleSpec,
    Runtime,
    ServeSpec,
    WantedState,
)
from reconciler.core.observed import LoadedModel, ServerProcess, flat_record
from reconciler.core.observed import (
    Health,
    ModelCheck,
    ModelState,
    Observed,
    Orphan,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
    Terminal,
)
from tests.support.worlds import CTX, ENVIRON, GB, QWEN, SERVE_PROGRAMS  # noqa: F401  (re-exported)

NAMES = ("a", "b", "c", "d", "e")
PORTS = (8080, 8081, 8082, 8083, 8084, 9000)
OLLAMA_PORT = 8086
NOW = 1000.0

MODELS = (
    ModelSpec(name="mlxq", format=ModelFormat.MLX, root="/m/mlxq",
              shards=(ModelFile(path="w.safetensors", sha256="1" * 64, size=GB),)),
    ModelSpec(name="llama3", format=ModelFormat.OLLAMA, source=ModelSourceInfo(ollama_tag="llama3:8b")),
    ModelSpec(name="phi", format=ModelFormat.OLLAMA, source=ModelSourceInfo(ollama_tag="phi3:mini")),
    QWEN,
)
MODELS_BY_NAME = {m.name: m for m in MODELS}
TAGS = ("llama3:8b", "phi3:mini")
#: Where a server may be found listening (§5), IPv4 and IPv6: every interface and
#: one address each, none of them loopback; and loopback ones, which are fine.
EXPOSED = ("0.0.0.0:{}", "[::]:{}", "192.168.1.5:{}", "[2001:db8::5]:{}")
LOOPBACK = ("127.0.0.1:{}", "127.0.0.9:{}", "[::1]:{}")


@attrs.frozen(kw_only=True)
class World:
    desired: Desired
    observed: Observed
    remembered: Remembered
    ctx: PlanContext = CTX
    now: float = NOW


def launch_of(spec: RoleSpec, node: NodeConfig, ctx: PlanContext = CTX):
    return identity.launch(spec, MODELS_BY_NAME, node, dict(ctx.environ), ctx.data_root)


def restart_policies() -> st.SearchStrategy[RestartPolicy]:
    return st.builds(
        RestartPolicy,
        max_restarts=st.sampled_from([2, 3, 1, 0]),  # not mostly 0: restarts, not give-ups
        base=st.sampled_from([1.0, 2.0, 4.0]),
        cap=st.sampled_from([4.0, 10.0, 30.0]),
        stable_after=st.sampled_from([10.0, 60.0]),
    )


@st.composite
def nodes(draw) -> NodeConfig:
    return NodeConfig(
        allowed_ports=draw(st.sampled_from([None, PortRange(start=8000, end=8999)])),
        memory_budget=draw(st.one_of(st.none(), st.integers(10, 100).map(lambda g: g * GB))),
        serve_programs=SERVE_PROGRAMS,
    )


@st.composite
def role_spec(draw, name: str, port: int, names: tuple[str, ...]) -> RoleSpec:
    runtime = draw(st.sampled_from(list(Runtime)))
    mode = draw(st.sampled_from([Mode.MANAGED, Mode.MANAGED, Mode.ADOPTED] if spec_of(runtime).managed else [Mode.ADOPTED]))
    if runtime is Runtime.OLLAMA:
        model, port = draw(st.sampled_from(["llama3", "phi"])), OLLAMA_PORT
    else:
        model = "qwen" if runtime is Runtime.LLAMACPP else "mlxq"
    others = [n for n in names if n != name]
    return RoleSpec(
        name=name,
        runtime=runtime,
        mode=mode,
        model=model,
        state=draw(st.sampled_from([WantedState.RUNNING, WantedState.RUNNING, WantedState.STOPPED])),
        serve=ServeSpec(port=port, ctx=draw(st.sampled_from([None, 4096, 8192]))),
        memory=MemorySpec(weights=draw(st.integers(0, 40)) * GB, kv=draw(st.integers(0, 4)) * GB),
        # a third of the roles exclude someone: enough refusals, not every claim refused
        excludes=frozenset(draw(st.lists(st.sampled_from(others), max_size=2))
                           if others and not draw(st.integers(0, 2)) else ()),
        restart=draw(restart_policies()),
        keep_alive=300.0 if runtime is Runtime.OLLAMA else None,
    )


@st.composite
def desireds(draw, min_size: int = 0) -> Desired:
    node = draw(nodes())
    names = tuple(sorted(draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=min_size))))
    ports = draw(st.permutations(PORTS))
    roles = tuple(draw(role_spec(n, ports[i], names)) for i, n in enumerate(names))
    return Desired(roles=roles, models=MODELS, node=node)


def ollama_probes() -> st.SearchStrategy[ProbeFacts | None]:
    @st.composite
    def probe(draw) -> ProbeFacts:
        listed = tuple(draw(st.lists(st.sampled_from(TAGS), unique=True)))
        resident = tuple(draw(st.lists(st.sampled_from(listed), unique=True))) if listed else ()
        health = draw(st.sampled_from([Health.UP] * 4 + [Health.LOADING, Health.UNREACHABLE]))
        return ProbeFacts(health=health, listed_models=listed, resident_models=resident)

    return st.one_of(st.none(), probe(), probe(), probe())


@st.composite
def observation(draw, name: str, pid: int, port: int) -> RoleObservation:
    kind = draw(st.sampled_from(["none", "alive", "alive", "dead", "dead", "unowned"]))
    process = None
    if kind != "none":
        process = ProcessFacts(
            pid=pid, create_time=1.0, alive=kind != "dead", owned=kind != "unowned",
            exit_observed_at=draw(st.sampled_from([None, 990.0])) if kind == "dead" else None)
    probe = draw(st.one_of(st.none(), st.builds(ProbeFacts, health=st.sampled_from(list(Health)))))
    return RoleObservation(
        name=name, process=process, probe=probe,
        port_taken=draw(st.sampled_from([False, False, False, True])),
        exposed=() if draw(st.integers(0, 3)) else (draw(st.sampled_from(EXPOSED)).format(port),),
    )


@st.composite
def orphans(draw, min_size: int = 0) -> tuple[Orphan, ...]:
    """Servers of ours no role wants (§4), listening on loopback, beyond it, or not at all."""
    count = draw(st.integers(min_size, 3))
    # mostly one listener (so that one wildcard alone decides), sometimes none or two
    listeners = st.lists(st.sampled_from(EXPOSED + LOOPBACK), min_size=1, max_size=1) | \
        st.lists(st.sampled_from(EXPOSED + LOOPBACK), max_size=2)
    return tuple(
        Orphan(pid=700 + i, create_time=1.0, instance_id=f"old{i}-1234abcd",
               listen=tuple(dict.fromkeys(a.format(8090 + i) for a in draw(listeners))))
        for i in range(count))


def ours(tag: str | None) -> LoadedModel | None:
    """The load part of a record whose model our own load put there (none without a tag)."""
    return LoadedModel(tag=tag, ours=True) if tag else None


@st.composite
def record(draw, name: str, pid: int, spec: RoleSpec | None, node: NodeConfig) -> RoleRecord:
    if spec is not None and draw(st.integers(0, 4)):
        runtime, mode, port = spec.runtime, spec.mode, spec.serve.port
    else:
        runtime = draw(st.sampled_from(list(Runtime)))
        mode = draw(st.sampled_from(list(Mode)))
        port = OLLAMA_PORT if runtime is Runtime.OLLAMA else draw(st.sampled_from(PORTS))
    digest, argv = None, ()
    if spec is not None and spec.managed and spec.runtime is not Runtime.OLLAMA:
        which = draw(st.sampled_from(["current", "current", "old", "none"]))
        if which != "none":
            old = spec if which == "current" else attrs.evolve(spec, serve=attrs.evolve(spec.serve, ctx=2048))
            launch = launch_of(old, node)
            digest, argv = launch.digest, launch.argv
    managed = mode is Mode.MANAGED
    footprint = spec.memory.footprint if spec is not None else draw(st.integers(0, 10)) * GB
    return flat_record(
        name=name,
        instance_id=identity.instance_id(spec) if spec is not None else f"{name}-00000000",
        runtime=runtime,
        mode=mode,
        port=port,
        pid=(drawn := draw(st.sampled_from([None, pid, pid]))
             if managed and runtime is not Runtime.OLLAMA else None),
        create_time=1.0 if drawn is not None else None,  # a create time is its pid's
        launch_digest=digest,
        launch_argv=argv,
        restarts=draw(st.sampled_from([0, 0, 1, 2, 4])),
        exited_at=draw(st.sampled_from([None, 950.0, 950.0, 999.0, 999.5])),
        healthy_since=draw(st.sampled_from([None, 900.0, 995.0])),
        terminal=draw(st.sampled_from([None] * 6 + [Terminal.GAVE_UP, Terminal.STOPPED_EXPOSED])),
        we_loaded=managed and runtime is Runtime.OLLAMA and draw(st.booleans()),
        model_tag=_tag(draw, spec) if runtime is Runtime.OLLAMA else None,
        reserved=draw(st.sampled_from([0, footprint])) if managed else 0,
    )


def _tag(draw, spec: RoleSpec | None) -> str:
    """Mostly the spec's own tag (so evictions happen), sometimes another (a tag change)."""
    if spec is not None and spec.runtime is Runtime.OLLAMA and spec.model and draw(st.integers(0, 3)):
        return MODELS_BY_NAME[spec.model].ollama_tag or TAGS[0]
    return draw(st.sampled_from(TAGS))


#: How a managed role's record and observation are drawn: "chaos" draws each
#: field on its own (odd combinations the planner must survive); the others
#: tell one coherent story, so that the risky branches (spec_changed restarts,
#: crash restarts, evictions, unloads, tag changes) come up in most worlds.
STORIES = {
    "server": ("chaos", "in-sync", "old-launch", "old-launch", "crashed", "crashed"),
    "ollama": ("chaos", "ours-resident", "ours-evicted", "ours-evicted", "ours-old-tag",
               "client-loaded"),
}


@st.composite
def worlds(draw, min_roles: int = 1) -> World:
    desired = draw(desireds(min_size=min_roles))
    remembered_names = {r.name for r in desired.roles if draw(st.integers(0, 3))}
    remembered_names |= set(draw(st.lists(st.sampled_from(NAMES), max_size=2)))
    names = sorted({r.name for r in desired.roles} | set(remembered_names))
    ollama_probe = draw(ollama_probes())
    resident: dict[str, bool] = {}  # tag → resident or not, as the stories need it
    observations, records = [], []
    for i, name in enumerate(names):
        spec = desired.role(name)
        pid = 100 + i
        port = spec.serve.port if spec is not None else PORTS[i % len(PORTS)]
        told = _story(draw, name, pid, spec, desired.node, resident)
        if told is not None:
            obs, rec = told
            records.append(rec)
        else:
            if name in remembered_names:
                records.append(draw(record(name, pid, spec, desired.node)))
            obs = draw(observation(name, pid, port))
        if obs.probe is not None and not desired.node.port_allowed(port):
            # the observer sends no packet outside allowed_ports (BEHAVIOUR §2)
            obs = attrs.evolve(obs, probe=ProbeFacts(health=Health.NOT_PROBED))
        observations.append(obs)
    if resident:
        ollama_probe = _with_tags(ollama_probe, resident)
    ollama_roles = {r.name for r in desired.roles if r.runtime is Runtime.OLLAMA}
    ollama_roles |= {r.name for r in records if r.runtime is Runtime.OLLAMA
                     and desired.role(r.name) is None}
    observations = [attrs.evolve(o, probe=ollama_probe, process=None, exposed=())
                    if o.name in ollama_roles else o for o in observations]
    checks = tuple(
        ModelCheck(name=m.name, state=draw(st.sampled_from(
            [ModelState.VERIFIED] * 8 + list(ModelState))))
        for m in MODELS
    )
    ctx = attrs.evolve(CTX, allow_empty=draw(st.booleans()),
                       operator_starts=frozenset(draw(st.lists(st.sampled_from(names)))) if names else frozenset())
    return World(desired=desired, observed=Observed(roles=tuple(observations), models=checks),
                 remembered=Remembered(roles=tuple(records)), ctx=ctx)


def _story(draw, name: str, pid: int, spec: RoleSpec | None, node: NodeConfig,
           resident: dict[str, bool]) -> tuple[RoleObservation, RoleRecord] | None:
    """A coherent record and observation for a managed role, or None: chaos.

    An adopted role of a launched runtime is, half the time, one we started
    and then switched to adopted: its record says managed, its process is
    ours and alive, and it listens beyond loopback (§5 still stops it).
    """
    if spec is not None and spec.mode is Mode.ADOPTED and spec_of(spec.runtime).launched \
            and (name == "z" or draw(st.booleans())):
        proc = ProcessFacts(pid=pid, create_time=1.0, alive=True, owned=True)
        return (RoleObservation(name=name, process=proc, probe=ProbeFacts(health=Health.UP),
                                exposed=(draw(st.sampled_from(EXPOSED)).format(spec.serve.port),)),
                flat_record(name=name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
                           mode=Mode.MANAGED, port=spec.serve.port, pid=pid, create_time=1.0,
                           reserved=spec.memory.footprint))
    if spec is None or spec.mode is not Mode.MANAGED:
        return None
    story = draw(st.sampled_from(STORIES["ollama" if spec.runtime is Runtime.OLLAMA else "server"]))
    if story == "chaos":
        return None
    base = flat_record(name=name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
                      mode=spec.mode, port=spec.serve.port,
                      restarts=draw(st.sampled_from([0, 0, 1])),
                      reserved=spec.memory.footprint)
    nothing = RoleObservation(name=name)
    if spec.runtime is Runtime.OLLAMA:
        tag = MODELS_BY_NAME[spec.model].ollama_tag if spec.model else None
        other = next(t for t in TAGS if t != tag)
        if story in ("ours-resident", "ours-evicted"):
            # an eviction wins: every role naming the tag then sees it gone
            resident[tag] = resident.get(tag, True) and story == "ours-resident"
            exited = None if story == "ours-resident" else draw(
                st.sampled_from([None, 950.0, 950.0]))
            return nothing, attrs.evolve(base, load=ours(tag), exited_at=exited)
        if story == "ours-old-tag":
            resident.setdefault(other, True)
            return nothing, attrs.evolve(base, load=ours(other))
        if story == "client-loaded":
            resident.setdefault(tag, True)
            return nothing, attrs.evolve(base, load=ours(tag), exited_at=950.0)
        return None
    launch = launch_of(spec, node)
    old = launch_of(attrs.evolve(spec, serve=attrs.evolve(spec.serve, ctx=2048)), node)
    alive = ProcessFacts(pid=pid, create_time=1.0, alive=True, owned=True)
    up = ProbeFacts(health=Health.UP)
    rec = attrs.evolve(base, process=ServerProcess(pid=pid, create_time=1.0), launch_digest=launch.digest, launch_argv=launch.argv,
                       healthy_since=draw(st.sampled_from([None, 900.0])))
    if story == "in-sync":
        return RoleObservation(name=name, process=alive, probe=up), rec
    if story == "old-launch":
        return (RoleObservation(name=name, process=alive, probe=up),
                attrs.evolve(rec, launch_digest=old.digest, launch_argv=old.argv))
    if story == "crashed":
        dead = attrs.evolve(alive, alive=False,
                            exit_observed_at=draw(st.sampled_from([None, 990.0])))
        return (RoleObservation(name=name, process=dead),
                attrs.evolve(rec, healthy_since=None,
                             exited_at=draw(st.sampled_from([None, 950.0, 950.0, 999.0]))))
    return None


def _with_tags(probe: ProbeFacts | None, resident: dict[str, bool]) -> ProbeFacts:
    """The one Ollama's probe, answering, with the stories' tags pulled and (not) resident."""
    if probe is None or probe.health is not Health.UP:
        probe = ProbeFacts(health=Health.UP)
    listed = tuple(dict.fromkeys((*probe.listed_models, *resident)))
    now = tuple(t for t in probe.resident_models if resident.get(t, True))
    now += tuple(t for t, yes in resident.items() if yes and t not in now)
    return attrs.evolve(probe, listed_models=listed, resident_models=now)


def converged(desired: Desired) -> World:
    """The world a correct reconciler leaves behind for ``desired`` (nothing to do)."""
    node = desired.node
    observations, records = [], []
    listed = TAGS
    resident = tuple(
        sorted({MODELS_BY_NAME[r.model].ollama_tag for r in desired.roles
                if r.runtime is Runtime.OLLAMA and r.wanted and r.model})
    )
    ollama_probe = ProbeFacts(health=Health.UP, listed_models=listed, resident_models=resident)
    for i, spec in enumerate(desired.roles):
        pid = 100 + i
        if spec.runtime is Runtime.OLLAMA:
            observations.append(RoleObservation(name=spec.name, probe=ollama_probe))
            if spec.managed and spec.wanted:
                records.append(flat_record(
                    name=spec.name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
                    mode=spec.mode, port=spec.serve.port, we_loaded=True,
                    model_tag=MODELS_BY_NAME[spec.model].ollama_tag, healthy_since=NOW - 1,
                    reserved=spec.memory.footprint))
            continue
        if not spec.managed:
            observations.append(RoleObservation(name=spec.name, probe=ProbeFacts(health=Health.UP)))
            continue
        if not spec.wanted or not node.port_allowed(spec.serve.port):
            continue
        launch = launch_of(spec, node)
        observations.append(RoleObservation(
            name=spec.name, process=ProcessFacts(pid=pid, create_time=1.0, alive=True, owned=True),
            probe=ProbeFacts(health=Health.UP)))
        records.append(flat_record(
            name=spec.name, instance_id=identity.instance_id(spec), runtime=spec.runtime,
            mode=spec.mode, port=spec.serve.port, pid=pid, create_time=1.0,
            launch_digest=launch.digest, launch_argv=launch.argv, healthy_since=NOW - 1,
            reserved=spec.memory.footprint))
    checks = tuple(ModelCheck(name=m.name, state=ModelState.VERIFIED) for m in MODELS)
    return World(desired=desired, observed=Observed(roles=tuple(observations), models=checks),
                 remembered=Remembered(roles=tuple(records)))


@st.composite
def exposure_worlds(draw) -> World:
    """Worlds where §5 decides: orphans of ours (some listening beyond loopback, IPv4 and
    IPv6); a third with no InferenceSpec at all (the empty-manifest guard, mostly not
    lifted); a third with a role ``z`` switched to adopted whose server, ours, is exposed."""
    w = draw(worlds(min_roles=0))
    kind = draw(st.sampled_from(["guard", "guard", "switched", "plain"]))
    desired, observed, remembered = w.desired, w.observed, w.remembered
    if kind == "guard":
        desired = attrs.evolve(desired, roles=())
    if kind == "switched":
        runtime = draw(st.sampled_from([Runtime.LLAMACPP, Runtime.MLX_LM]))
        spec = RoleSpec(name="z", runtime=runtime, mode=Mode.ADOPTED,
                        model="qwen" if runtime is Runtime.LLAMACPP else "mlxq",
                        serve=ServeSpec(port=8087),
                        memory=MemorySpec(weights=GB))
        obs, rec = _story(draw, "z", 199, spec, desired.node, {}) or (None, None)
        assert obs is not None and rec is not None  # (the switched story, drawn again until told)
        desired = attrs.evolve(desired, roles=(*desired.roles, spec))
        observed = attrs.evolve(observed, roles=(*observed.roles, obs))
        remembered = attrs.evolve(remembered, roles=(*remembered.roles, rec))
    ctx = attrs.evolve(w.ctx, allow_empty=draw(st.sampled_from([False, False, False, True])))
    return attrs.evolve(w, ctx=ctx, desired=desired, remembered=remembered,
                        observed=attrs.evolve(observed, orphans=draw(orphans(1))))
