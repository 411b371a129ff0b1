"""A stateful model of reconciling: manifests change, servers crash, the clock moves.

Hypothesis drives a RuleBasedStateMachine whose rules add, remove and edit
roles, crash servers, evict Ollama models, let a foreign process take a port,
expose a server beyond loopback, advance the clock, run operator starts and
reconcile (plan → simulate). Invariants are checked after every step.
"""

from __future__ import annotations

import attrs
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from reconciler.planner import render
from reconciler.core.decisions import Decision, Plan, Verb
from reconciler.core.desired import (
    Desired,
    MemorySpec,
    Mode,
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
from reconciler.core.devices import Device, DeviceKind, DeviceRequest
from reconciler.core.observed import (
    Health,
    ModelCheck,
    ModelState,
    Observed,
    ProbeFacts,
    Remembered,
    RoleObservation,
    Terminal,
)
from reconciler.planner.plan import plan
from reconciler.runtimes import spec_of
from tests.plan.simulate import simulate, skipped
from tests.plan.test_properties import check_safety
from tests.plan.worlds import CTX, GB, MODELS, OLLAMA_PORT, SERVE_PROGRAMS, World

NAMES = ("a", "b", "c", "d")
PORTS = (8080, 8081, 8082, 8083)
POLICY = RestartPolicy(max_restarts=2, base=1.0, cap=8.0, stable_after=20.0)
NODE = NodeConfig(
    allowed_ports=PortRange(start=8000, end=8999),
    memory_budget=40 * GB,
    serve_programs=SERVE_PROGRAMS,
    restart=POLICY,
    devices=(Device(id="cuda:0", kind=DeviceKind.CUDA, memory=16 * GB),
             Device(id="cuda:1", kind=DeviceKind.CUDA, memory=16 * GB)),
)
#: §7.1 what a llama.cpp role may ask of the devices (None: host-only).
DEVICE_REQUESTS = (None, None, DeviceRequest(count=1), DeviceRequest(count=2),
                   DeviceRequest(ids=("cuda:1",)), DeviceRequest(ids=("cuda:0", "cuda:1"), split=(3.0, 1.0)))
#: ``big`` names a tag the Ollama server has not pulled.
ALL_MODELS = tuple(sorted(
    (*MODELS, ModelSpec(name="big", format=ModelFormat.OLLAMA,
                        source=ModelSourceInfo(ollama_tag="big:70b"))),
    key=lambda m: m.name))
LISTED = ("llama3:8b", "phi3:mini")


class Reconciling(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.roles: dict[str, RoleSpec] = {}
        self.observed: dict[str, RoleObservation] = {}
        self.remembered = Remembered()
        self.resident: tuple[str, ...] = ()  # the one Ollama server's /api/ps
        self.foreign: set[int] = set()
        self.operator: set[str] = set()
        self.failing: set[str] = set()  # roles whose next action fails
        self.listening: dict[str, int] = {}  # our live servers' real ports
        self.allow_empty = True
        self.now = 1000.0
        self.last: Plan | None = None

    # ------------------------------------------------------------ the world

    def desired(self) -> Desired:
        return Desired(roles=tuple(sorted(self.roles.values(), key=lambda r: r.name)),
                       models=ALL_MODELS, node=NODE)

    def port_of(self, name: str) -> int | None:
        spec = self.roles.get(name)
        if spec is not None:
            return spec.serve.port
        rec = self.remembered.role(name)
        return rec.port if rec is not None else None

    def live_port(self, name: str) -> int | None:
        """Where our live server really listens: the port it was started on."""
        return self.listening.get(name)

    def is_ollama(self, name: str) -> bool:
        spec, rec = self.roles.get(name), self.remembered.role(name)
        runtime = spec.runtime if spec is not None else rec.runtime if rec is not None else None
        return runtime is Runtime.OLLAMA

    def live(self, name: str) -> bool:
        p = self.observed.get(name, RoleObservation(name=name)).process
        return p is not None and p.alive and p.owned

    def world(self) -> World:
        names = set(self.roles) | {r.name for r in self.remembered.roles} | set(self.observed)
        ollama = ProbeFacts(health=Health.UP, listed_models=LISTED, resident_models=self.resident)
        roles = []
        for name in sorted(names):
            o = self.observed.get(name, RoleObservation(name=name))
            if self.is_ollama(name):
                o = attrs.evolve(o, process=None, probe=ollama, exposed=())
            # the observer checks the port the role should listen on; a foreign
            # process never holds a port our live server listens on (see the rule)
            o = attrs.evolve(o, port_taken=self.port_of(name) in self.foreign)
            roles.append(o)
        checks = tuple(ModelCheck(name=m.name, state=ModelState.VERIFIED) for m in ALL_MODELS)
        ctx = attrs.evolve(CTX, operator_starts=frozenset(self.operator),
                           allow_empty=self.allow_empty)
        return World(desired=self.desired(), observed=Observed(roles=tuple(roles), models=checks),
                     remembered=self.remembered, ctx=ctx, now=self.now)

    def free_port(self, data: st.DataObject, name: str) -> int | None:
        taken = {r.serve.port for n, r in self.roles.items() if n != name}
        taken |= {port for n, port in self.listening.items() if n != name and self.live(n)}
        free = [p for p in PORTS if p not in taken]
        return data.draw(st.sampled_from(free)) if free else None

    # ------------------------------------------------------------ rules

    def pick(self, data: st.DataObject, names) -> str | None:
        names = sorted(names)
        return data.draw(st.sampled_from(names)) if names else None

    @initialize(data=st.data())
    def two_servers(self, data) -> None:
        for _ in range(2):
            self.add_role(data, runtime=Runtime.LLAMACPP, adopted=False, weights=10, excludes=set())

    @rule(data=st.data(), runtime=st.sampled_from(list(Runtime)),
          adopted=st.sampled_from([False, False, False, True]),
          weights=st.integers(0, 20), excludes=st.sets(st.sampled_from(NAMES), max_size=2))
    def add_role(self, data, runtime, adopted, weights, excludes) -> None:
        name = self.pick(data, set(NAMES) - set(self.roles))
        if name is None:
            return
        if runtime is Runtime.OLLAMA:
            port, model = OLLAMA_PORT, data.draw(st.sampled_from(["llama3", "phi", "big"]))
        else:
            port = self.free_port(data, name)
            model = "qwen" if runtime is Runtime.LLAMACPP else "mlxq"
            if port is None:
                return
        mode = Mode.ADOPTED if adopted or not spec_of(runtime).managed else Mode.MANAGED
        devices = (data.draw(st.sampled_from(DEVICE_REQUESTS))
                   if runtime is Runtime.LLAMACPP and mode is Mode.MANAGED else None)
        self.roles[name] = RoleSpec(
            name=name, runtime=runtime, mode=mode,
            model=model, serve=ServeSpec(port=port), memory=MemorySpec(weights=weights * GB),
            excludes=frozenset(excludes - {name}), restart=POLICY,
            keep_alive=300.0 if runtime is Runtime.OLLAMA else None, devices=devices)

    @rule(data=st.data())
    def remove_role(self, data) -> None:
        name = self.pick(data, self.roles)
        if name is not None:
            del self.roles[name]

    @rule(data=st.data(), what=st.sampled_from(["ctx", "memory", "excludes", "state", "port",
                                                 "devices"]))
    def edit_role(self, data, what) -> None:
        name = self.pick(data, self.roles)
        if name is None:
            return
        spec = self.roles[name]
        if what == "ctx":
            spec = attrs.evolve(spec, serve=attrs.evolve(spec.serve, ctx=data.draw(st.sampled_from([None, 4096, 8192]))))
        elif what == "memory":
            spec = attrs.evolve(spec, memory=MemorySpec(weights=data.draw(st.integers(0, 25)) * GB))
        elif what == "devices":
            if spec.runtime is not Runtime.LLAMACPP or not spec.managed:
                return
            spec = attrs.evolve(spec, devices=data.draw(st.sampled_from(DEVICE_REQUESTS)))
        elif what == "excludes":
            spec = attrs.evolve(spec, excludes=frozenset(data.draw(st.sets(st.sampled_from(NAMES), max_size=2))) - {name})
        elif what == "state":
            spec = attrs.evolve(spec, state=WantedState.STOPPED if spec.wanted else WantedState.RUNNING)
        elif spec.runtime is not Runtime.OLLAMA:
            port = self.free_port(data, name)
            if port is None:
                return
            spec = attrs.evolve(spec, serve=attrs.evolve(spec.serve, port=port))
        self.roles[name] = spec

    @rule(data=st.data(), kind=st.sampled_from(["crash", "crash", "crash", "evict", "evict", "expose"]),
          seen_at_exit=st.booleans())
    def fault(self, data, kind, seen_at_exit) -> None:
        """A server dies, Ollama drops a model behind our back, or a server binds 0.0.0.0."""
        if kind == "evict":
            tag = self.pick(data, self.resident)
            self.resident = tuple(t for t in self.resident if t != tag)
            return
        name = self.pick(data, [n for n in self.observed if self.live(n)])
        if name is None:
            return
        o = self.observed[name]
        assert o.process is not None
        if kind == "expose":
            self.observed[name] = attrs.evolve(o, exposed=(f"0.0.0.0:{self.live_port(name)}",))
            return
        self.listening.pop(name, None)
        proc = attrs.evolve(o.process, alive=False, exit_observed_at=self.now if seen_at_exit else None)
        self.observed[name] = attrs.evolve(o, process=proc, probe=ProbeFacts(health=Health.UNREACHABLE),
                                           exposed=())

    @rule(data=st.data())
    def next_action_fails(self, data) -> None:
        """A spawn dies at once, a stop does not take, Ollama refuses a load or unload."""
        name = self.pick(data, set(self.roles) | {r.name for r in self.remembered.roles})
        if name is not None:
            self.failing.add(name)

    @rule(port=st.sampled_from(PORTS))
    def foreign_takes_port(self, port) -> None:
        if not any(self.live(n) and self.live_port(n) == port for n in self.observed):
            self.foreign.add(port)

    @rule(port=st.sampled_from(PORTS))
    def foreign_leaves_port(self, port) -> None:
        self.foreign.discard(port)

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 10.0, 30.0]))
    def advance_clock(self, seconds) -> None:
        self.now += seconds

    @rule()
    def toggle_allow_empty(self) -> None:
        self.allow_empty = not self.allow_empty

    @rule(name=st.sampled_from(NAMES))
    def operator_start(self, name) -> None:
        self.operator.add(name)

    @rule()
    def reconcile(self) -> None:
        self.pass_once()

    @rule()
    def settle(self) -> None:
        """Without new faults, and with time to wait out backoff, two passes converge."""
        self.foreign.clear()
        self.failing.clear()
        for _ in range(2):
            self.now += 100.0
            self.pass_once()
        self.now += 100.0
        p = self.pass_once()
        assert p.changes == (), render.text(p)

    def pass_once(self) -> Plan:
        w = self.world()
        p = plan(w.desired, w.observed, w.remembered, w.ctx, w.now)
        check_safety(w, p)
        self.check_plan(w, p)
        failing = frozenset(self.failing & {d.role for d in p.decisions if d.acts})
        observed, self.remembered = simulate(p, w.desired, w.observed, w.remembered, w.now,
                                             failing)
        self.observed = {o.name: o for o in observed.roles if o.process is not None or o.exposed}
        skip = skipped(p, failing)
        for d in p.decisions:
            event(f"{d.verb} ({d.reason})" + (" failed" if d.role in failing else "")
                  + (" skipped" if d.role in skip else ""))
            if d.role in skip:
                continue  # the executor never tried it: an earlier stop did not free memory
            if d.role in failing:
                if d.verb is Verb.RESTART:
                    self.listening.pop(d.role, None)  # the old one stopped, the new one died
                continue
            if d.model_tag and d.verb is Verb.LOAD:
                self.resident = tuple(t for t in self.resident if t != d.model_tag) + (d.model_tag,)
            elif d.model_tag and d.verb is Verb.UNLOAD:
                self.resident = tuple(t for t in self.resident if t != d.model_tag)
            elif d.verb in (Verb.START, Verb.RESTART):
                assert d.port is not None
                self.listening[d.role] = d.port
            elif d.verb is Verb.STOP:
                self.listening.pop(d.role, None)
        self.failing -= failing - skip  # a skipped action was not tried: its fault waits
        self.operator.clear()
        self.last = p
        return p

    def check_plan(self, w: World, p: Plan) -> None:
        for d in p.decisions:
            rec = w.remembered.role(d.role)
            terminal = rec is not None and rec.terminal is not None
            if terminal and d.role not in w.ctx.operator_starts:
                # Holds are per generation (§4): only a new one passes them.
                new = d.generation not in (None, rec.generation or rec.launch_digest)
                assert d.verb not in (Verb.START, Verb.RESTART, Verb.LOAD) or new, d
            if d.verb is Verb.RESTART and d.reason.value == "crashed":
                assert rec is not None and d.restarts <= POLICY.max_restarts
            _no_blind_ollama(w, d)

    # ------------------------------------------------------------ invariants

    @invariant()
    def ledger_within_budget(self) -> None:
        assert sum(r.reserved for r in self.remembered.roles) <= (NODE.memory_budget or 0)

    @invariant()
    def devices_within_memory(self) -> None:
        """§7.1 what our live servers hold on each device never exceeds its memory."""
        used: dict[str, int] = {}
        for rec in self.remembered.roles:
            if self.live(rec.name):
                for device, size in rec.devices:
                    used[device] = used.get(device, 0) + size
        for device in NODE.devices:
            assert used.get(device.id, 0) <= device.memory, used

    @invariant()
    def one_live_server_per_port(self) -> None:
        ports = [self.live_port(n) for n in self.observed if self.live(n)]
        assert len(ports) == len(set(ports))
        assert not (set(ports) & self.foreign)

    @invariant()
    def records_stay_sane(self) -> None:
        for rec in self.remembered.roles:
            assert rec.restarts <= POLICY.max_restarts
            assert rec.reserved >= 0
            if rec.mode is Mode.ADOPTED:
                assert rec.pid is None and not rec.we_loaded
            if rec.terminal is not None:
                assert not self.live(rec.name)
            if rec.terminal is Terminal.STOPPED_EXPOSED or rec.terminal is Terminal.GAVE_UP:
                assert rec.reserved == 0


def _no_blind_ollama(w: World, d: Decision) -> None:
    if d.verb in (Verb.LOAD, Verb.UNLOAD):
        probe = w.observed.role(d.role).probe
        assert probe is not None and probe.health is Health.UP


TestReconciling = Reconciling.TestCase
