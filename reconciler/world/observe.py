"""Reading the world: servers and processes → ``Observed`` (SHELL).

Every pass observes every desired role and every remembered one (a removed
role still has a process to stop). For each role:

* the port allowlist is checked **first**: a port outside it gets
  ``ProbeFacts(health=NOT_PROBED)`` and not a single packet;
* the HTTP probes its runtime declares are sent (``probe.py``), all roles
  concurrently; roles of a shared-endpoint runtime (Ollama) on one host:port
  share one set of probes per pass;
* the process table (``procs.py``) gives the facts of the pid the store
  recorded, or of an unrecorded process carrying our marker;
* ``exposed``: non-loopback listeners of our process group (§5);
* ``port_taken``: a managed role's port accepts connections and the listener
  is not our process (§4: never start over it); an adopted role's probe
  timed out after the port took the connection (hung, not gone: ``unknown``);
* ``exit``: how a recorded server of ours that is gone ended, the first time
  it is found gone (``postmortem.gather``: exit status, log tail, OOM kill).

Probes never raise: every failure is a value in ``ProbeFacts``. The cheap
model checks come with the observation (``modelchecks.check``: a sticky
mismatch the store remembers, a vanished model root).

Size: one observation per role (probes, process facts, exposure, the port's
other users), gathered concurrently: every probe on one selector (``probe.Wires``),
the process table in a thread while the first requests are answered.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Mapping, TypeVar

import attrs

from reconciler.world import instances, pkgversion, probe, procs
from reconciler.models import modelchecks
from reconciler.core import loopback
from reconciler.core.desired import Desired, Mode, ModelSpec, RoleSpec, Runtime
from reconciler.core.observed import (
    ExitInfo,
    Health,
    Observed,
    ProbeFacts,
    ProcessFacts,
    Remembered,
    RoleObservation,
    RoleRecord,
)
from reconciler.runtimes import spec_of
from reconciler.runtimes.common import ErrorKind, ProbeAnswer, ProbeContext, ProbeRequest
from reconciler.runtimes.spec import RuntimeSpec


@attrs.frozen(kw_only=True)
class Target:
    """One role to observe, from its spec (desired) or its record (removed)."""

    name: str
    runtime: Runtime
    managed: bool
    host: str
    port: int
    ctx: ProbeContext
    spec: RoleSpec | None = None
    record: RoleRecord | None = None

    @property
    def rt(self) -> RuntimeSpec:
        return spec_of(self.runtime)

    @property
    def probe_key(self) -> tuple[object, ...]:
        """Targets with one key share one exchange: a shared endpoint is asked once."""
        if self.rt.shared_endpoint:
            return ("endpoint", self.runtime, self.host, self.port)
        return ("role", self.name)


def _wanted(spec: RoleSpec | None, record: RoleRecord | None,
            model: Callable[[str | None], ModelSpec | None]) -> str | None:
    """The model name the server should list; a removed role: the tag we loaded."""
    remembered = record.model_tag if record is not None else None
    if spec is None:
        return remembered
    return spec_of(spec.runtime).wanted(spec, model(spec.model)) or remembered


def target(name: str, desired: Desired, remembered: Remembered) -> Target:
    """What to probe for one role and how (pure; exposed for tests and commands)."""
    return _target(name, desired.role(name), remembered.role(name), desired.model)


_N = TypeVar("_N", RoleSpec, RoleRecord, ModelSpec)


def _first_by_name(items: Iterable[_N]) -> dict[str, _N]:
    """name → the first item of that name (as ``Desired.role``/``Remembered.role`` find it)."""
    out: dict[str, _N] = {}
    for item in items:
        out.setdefault(item.name, item)
    return out


def targets(desired: Desired, remembered: Remembered) -> list[Target]:
    """``target`` of every desired and remembered role, by name: each spec, record and
    Model looked up once in an index, not by a walk of every role for each role."""
    specs, records = _first_by_name(desired.roles), _first_by_name(remembered.roles)
    models = _first_by_name(desired.models)
    out = [_target(n, specs.get(n), records.get(n), models.get)
           for n in sorted(specs.keys() | records.keys())]
    if not desired.programs:
        return out
    pinned = {r.name for r in desired.roles if r.managed and desired.program_for(r) is not None}
    return [attrs.evolve(t, ctx=attrs.evolve(t.ctx, version=True)) if t.name in pinned else t
            for t in out]


def _target(name: str, spec: RoleSpec | None, record: RoleRecord | None,
            model: Callable[[str | None], ModelSpec | None]) -> Target:
    if spec is not None:
        runtime, managed = spec.runtime, spec.managed
        host, port = spec.serve.host, spec.serve.port
    else:
        assert record is not None, name
        runtime, managed = record.runtime, record.mode is Mode.MANAGED
        host, port = record.host, record.port
    rt = spec_of(runtime)
    if not port:
        port = rt.default_port or port
    started = record is not None and record.started_at is not None
    starting = managed and started and record is not None and record.healthy_since is None
    ctx = ProbeContext(
        wanted=_wanted(spec, record, model),
        adopted=not managed,
        starting=starting and rt.launched,
        # The readiness request: only for a desired managed role after a start.
        readiness=rt.readiness is not None and spec is not None and starting,
        launch_argv=record.launch_argv if record is not None else (),
    )
    return Target(
        name=name, runtime=runtime, managed=managed, host=host, port=port, ctx=ctx,
        spec=spec, record=record,
    )


def with_process(t: Target, process: ProcessFacts | None) -> Target:
    """What the process table changes in how a role is asked.

    The readiness request goes only to our own live process. ``settled``: our
    own live process on the role's port that has answered healthy since it was
    created (``healthy_since`` after its create time: the same pid and create
    time, not a predecessor) — a runtime may then read its identity from the
    launch instead of asking the server again every pass. Adopted servers are
    foreign: they are always asked.
    """
    ours = process is not None and process.owned and process.alive
    record = t.record
    settled = (
        ours and t.managed and t.spec is not None and record is not None
        and record.healthy_since is not None and record.create_time is not None
        and record.healthy_since >= record.create_time and bool(record.launch_argv)
        and any(_listen_port(a) == t.port for a in process.listen)  # type: ignore[union-attr]
    )
    if (ours or not t.ctx.readiness) and settled == t.ctx.settled:
        return t
    return attrs.evolve(t, ctx=attrs.evolve(t.ctx, readiness=t.ctx.readiness and ours,
                                            settled=settled))


def not_probed(port: int, desired: Desired) -> ProbeFacts:
    return ProbeFacts(
        health=Health.NOT_PROBED,
        detail=f"port {port} is outside allowed_ports {desired.node.allowed_ports}: not probed",
    )


# ---------------------------------------------------------------- HTTP side


Known = Mapping[ProbeRequest, ProbeAnswer]


def _jobs(allowed: list[Target]) -> dict[object, Target]:
    """One exchange per probe key (a shared endpoint is asked once for all its roles)."""
    jobs: dict[object, Target] = {}
    for t in allowed:
        jobs.setdefault(t.probe_key, t)
    return jobs


def _sender(wires: probe.Wires, t: Target, timeout: float
            ) -> Callable[[ProbeRequest, probe.Done], None]:
    timeout = _timeout(t, timeout)
    key = probe.api_key(t.spec.serve.api_key_file) if t.spec is not None else None

    def send(request: ProbeRequest, then: probe.Done) -> None:
        wires.ask(t.host, t.port, request, timeout=timeout, key=key, then=then)

    return send


def _timeout(t: Target, timeout: float) -> float:
    """A role with liveness checks is asked within its own ``liveness.timeout`` (§4.1)."""
    live = t.spec.liveness if t.spec is not None and not t.rt.shared_endpoint else None
    return live.timeout if live is not None else timeout  # (ignored on a shared endpoint)


def _on(wires: probe.Wires | None, work: Callable[[probe.Wires], None]) -> None:
    """Run ``work``'s requests on ``wires`` (to their end), or on a selector of their own."""
    own = wires is None
    wires = probe.Wires() if wires is None else wires
    try:
        work(wires)
        wires.run()
    finally:
        if own:
            wires.close()


def ask_progress(allowed: list[Target], facts: dict[str, ProbeFacts], timeout: float,
                 wires: probe.Wires | None = None) -> dict[str, ProbeFacts]:
    """§4.1 *no progress*: the work counters of each answering role that has liveness checks
    and whose runtime and launch expose them (llama.cpp's ``/metrics``); one GET each."""
    asked = [t for t in allowed
             if t.spec is not None and t.spec.liveness is not None
             and t.rt.progress is not None and t.rt.progress.asked(t.spec)
             and facts[t.name].health in (Health.UP, Health.UNHEALTHY, Health.LOADING)]
    if not asked:
        return facts
    answers: dict[str, ProbeAnswer] = {}

    def work(w: probe.Wires) -> None:
        for t in asked:
            _sender(w, t, timeout)(t.rt.progress.request,  # type: ignore[union-attr]
                                   lambda answer, name=t.name: answers.__setitem__(name, answer))

    _on(wires, work)
    out = dict(facts)
    for t in asked:
        progress, answer = t.rt.progress, answers[t.name]
        assert progress is not None
        if answer.error is ErrorKind.TIMEOUT:
            out[t.name] = attrs.evolve(facts[t.name], progress_timeout=(
                f"no answer to {progress.request} {answer.error_detail}"))
        else:
            out[t.name] = attrs.evolve(facts[t.name], progress=progress.read(answer))
    return out


def send_first(allowed: list[Target], timeout: float, wires: probe.Wires) -> dict[object, Known]:
    """Every exchange's first batch, sent now on ``wires``; by probe key, each filled in
    as its answers arrive (``wires.run()``).

    A first batch never depends on the context (the contract test pins it: GETs
    of ``/health`` or ``/api/version``), so it can go out before the process table
    is read; ``probe_all`` then replays the answers.
    """
    jobs = _jobs(allowed)
    known: dict[object, dict[ProbeRequest, ProbeAnswer]] = {key: {} for key in jobs}
    for key, t in jobs.items():
        send = _sender(wires, t, timeout)
        for request in next(t.rt.exchange(t.ctx)):
            send(request, lambda answer, got=known[key], r=request: got.__setitem__(r, answer))
    return known  # type: ignore[return-value]


def probe_all(allowed: list[Target], timeout: float,
              known: Mapping[object, Known] | None = None,
              wires: probe.Wires | None = None) -> dict[str, ProbeFacts]:
    """Probe every target concurrently; one exchange per shared endpoint.

    ``known``: answers already in hand by probe key (``ask_first``); not asked again.
    """
    jobs = _jobs(allowed)
    answers: dict[object, dict[str, ProbeAnswer]] = {}

    def work(w: probe.Wires) -> None:
        for key, t in jobs.items():
            probe.exchange(w, t.rt.exchange(t.ctx), _sender(w, t, timeout),
                           (known or {}).get(key, {}),
                           lambda result, key=key: answers.__setitem__(key, result))

    _on(wires, work)
    return {t.name: t.rt.read(answers[t.probe_key], t.ctx) for t in allowed}


# ---------------------------------------------------------------- process side


def _listen_port(address: str) -> int | None:
    port = address.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def _exposed(t: Target, facts: ProcessFacts | None, allowed: bool,
             listeners_readable: bool = True) -> tuple[str, ...]:
    if facts is None or not facts.owned or not facts.alive:
        return ()
    if facts.listen or listeners_readable:
        # A readable table with no listener is a server not listening yet.
        return tuple(a for a in facts.listen if not loopback.is_loopback(a))
    if not allowed:
        return ()
    # The listeners could not be read: connect to each interface address (§5).
    return tuple(
        f"[{ip}]:{t.port}" if ":" in ip else f"{ip}:{t.port}"
        for ip in procs.interface_addresses()
        if procs.accepts_connections(ip, t.port, timeout=0.3)
    )


def _port_taken(t: Target, facts: ProcessFacts | None) -> bool:
    if not t.managed or t.spec is None:
        return False  # adopted servers are not ours by design; removed roles never start
    ours = facts is not None and facts.owned and facts.alive and any(
        _listen_port(a) == t.port for a in facts.listen
    )
    return not ours and procs.accepts_connections(t.host, t.port)


def _exit(t: Target, facts: ProcessFacts | None, root: str | None,
          records: bool = True) -> ExitInfo | None:
    """How our recorded server ended, when it is gone and the record does not say yet."""
    r = t.record
    if r is None or not r.pid or r.exit is not None or facts is None or facts.alive:
        return None
    if procs.is_running(r.pid, r.create_time):
        return None  # alive but not ours to call ours (the marker is gone): not an exit
    from reconciler.world import postmortem

    cwd = instances.instance_dir(root, r.instance_id) if root else None
    return postmortem.gather(r.pid, r.create_time, cwd, records=records)


def process_side(
    all_targets: list[Target], allowed: set[str], root: str | None = None,
    records: bool = True,
) -> dict[str, tuple[ProcessFacts | None, tuple[str, ...], bool, ExitInfo | None]]:
    """Process facts, exposure, port_taken and exit per role (blocking; run in a thread)."""
    facts: dict[str, ProcessFacts | None] = {}
    recorded = [t for t in all_targets if t.record is not None and t.record.pid]
    listeners = procs.listeners_by_group([t.record.pid for t in recorded]) if recorded else {}
    readable = listeners is not None
    for t in all_targets:
        r = t.record
        facts[t.name] = (
            procs.process_facts(r.pid, r.create_time, r.instance_id, listeners)
            if r is not None and r.pid else None
        )
    out = {}
    for t in all_targets:
        f = facts[t.name]
        ok = t.name in allowed
        out[t.name] = (f, _exposed(t, f, ok, readable), ok and _port_taken(t, f),
                       _exit(t, f, root, records))
    return out


# ---------------------------------------------------------------- entry points


_T = TypeVar("_T")


class _Beside(threading.Thread):
    """``fn(*args)`` in a thread beside the probes; ``result()`` waits and returns or raises."""

    def __init__(self, fn: Callable[..., _T], *args: object) -> None:
        super().__init__(daemon=True, name="observe")
        self._call = (fn, args)
        self._value: object = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        fn, args = self._call
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the caller in result()
            self._error = exc

    def result(self):  # type: ignore[no-untyped-def]
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def observe(
    desired: Desired, remembered: Remembered, *, probe_timeout: float | None = None,
    sticky: Mapping[str, str] | None = None, root: str | None = None, records: bool = True,
) -> Observed:
    """Observe every desired and remembered role once (see the module docstring).

    ``root``: the instance directories' root, where a gone server's log is read.
    ``records``: the pass will record what it finds (False: ``status``, ``plan``; see
    ``postmortem.gather``).
    """
    timeout = desired.node.probe_timeout if probe_timeout is None else probe_timeout
    all_targets = targets(desired, remembered)
    allowed = [t for t in all_targets if desired.node.port_allowed(t.port)]
    allowed_names = {t.name for t in allowed}
    # §7.1 a node with devices: what the machine has, and each process's use (NVML, nvidia-smi).
    finding = None
    if desired.node.devices:  # (discovery's modules are imported only for such a node)
        from reconciler.world import devices

        finding = _Beside(devices.discover)
    # The process table decides what follows each first GET: the readiness
    # POST goes only to a port whose listener is our own live process, never
    # to a stranger that took the port after our server died, and only our own
    # settled server is spared the identity requests. Reading it takes as long
    # as a probe with many servers, so the first GETs (the same whatever it
    # says) go out first, and it is read while they are answered.
    wires = probe.Wires()
    try:
        known = send_first(allowed, timeout, wires)
        reading = _Beside(process_side, all_targets, allowed_names, root, records)
        try:
            wires.run()
        finally:
            sides = reading.result()
        allowed = [with_process(t, sides[t.name][0]) for t in allowed]
        probes = ask_progress(allowed, probe_all(allowed, timeout, known, wires), timeout, wires)
    finally:
        wires.close()
    roles = []
    for t in all_targets:
        process, exposed, taken, ended = sides[t.name]
        facts = probes.get(t.name) or not_probed(t.port, desired)
        if t.ctx.version and t.rt.version_of_process:  # §14 no version over HTTP
            facts = pkgversion.observed(facts, process)
        if not t.managed and facts.timed_out:
            # An adopted server that took the connection and never answered is
            # there, hung: its port is taken (unknown), not free (exited) (§4).
            taken = True
        roles.append(RoleObservation(
            name=t.name, process=process, probe=facts, port_taken=taken, exposed=exposed,
            exit=ended,
        ))
    found = finding.result() if finding is not None else None
    # ``sticky``: the store's sticky model mismatches (model → detail).
    return Observed(roles=tuple(roles), models=modelchecks.check(desired, sticky or {}),
                    # No tool answered: the declaration is trusted (nothing is "missing").
                    devices=found.devices if found is not None and found.tool else None,
                    device_use=found.uses if found is not None else ())
