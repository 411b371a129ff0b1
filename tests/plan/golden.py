"""Golden plan cases: YAML data → plan() inputs and expectations (test helper).

One file per scenario in ``tests/plan/golden/``. Shape (everything optional
except ``expect`` or ``steps``)::

    description: one line saying what the case pins
    twin: other-case          # required when the case acts: its "does nothing" twin
    node: {allowed_ports: [8000, 8999], memory_budget: 96GB,
           restart: {max_restarts: 2, base: 2, cap: 60, stable_after: 60},
           devices: {"cuda:0": 24GB, "cuda:1": 24GB}}              # §7.1
    ctx: {allow_empty: false, operator_starts: [coder]}
    elsewhere: {coder: [gpu-2]}   # roles of the set placed on other nodes (§10)
    models: {qwen: {format: gguf, size: 1000}, llama3: {format: ollama, tag: "llama3:8b"}}
    roles:
      coder: {runtime: llamacpp, mode: managed, model: qwen, port: 8090, ctx: 4096,
              kv_quant: q8_0, draft_model: x, state: running, memory: {weights: 55GB, kv: 0},
              excludes: [role:voice], restart: {max_restarts: 3}, keep_alive: 300,
              idle_after: 600,                  # state: on-demand (§9)
              replicas: 3, shared_by_replicas: false,  # §12 instances coder, coder/1, …
              devices: {count: 1}}              # §7.1 or {ids: ["cuda:1"], split: [3, 1]}
    observed:
      models: {qwen: verified}          # default: every model verified
      orphans: [{pid: 700, instance_id: old-1234abcd, listen: ["127.0.0.1:8095"]}]
      roles:
        coder: {pid: 100, alive: true, owned: true, exit_observed_at: 5,
                health: up, detail: "", listed: [], resident: [],
                port_taken: false, exposed: [], timed_out: false,
                progress: {in_flight: 1, decoded: 50}, progress_timeout: "",
                exit: {known: true, code: 1, signal: null, oom: "", log: ["…"]}}
      demand:                           # §9 the router's counts; absent: no daemon
        coder: {waiting: 3, in_flight: 0, last_request: 900}
      demand_since: 500                 # when the router began counting
      devices: {"cuda:0": 24GB}           # §7.1 what discovery found (absent: not looked)
      device_use: {100: {"cuda:0": 13.1GB}}  # §7.1 pid → device memory it uses
    remembered:
      coder: {pid: 100, restarts: 0, exited_at: null, healthy_since: null,
              terminal: gave-up, terminal_detail: "", we_loaded: false,
              model_tag: null, reserved: 55GB, port: 8090, runtime: llamacpp,
              mode: managed, launch: current,   # launch: current | none | {ctx: 2048, …}
              exit: {known: true, code: 1, log: ["…"]},      # how the last server ended
              liveness: {failures: 2, since: 990, checked_at: 995, detail: "…"},
              restarted_at: "a", started_at: 990,  # the generation's restarted_at
              devices: {"cuda:1": 12GB},             # §7.1 the last launch's devices
              loaded: {tag: "llama3:8b", keep_alive: 300},  # an Ollama record's generation
              intent: {verb: restart, reason: spec_changed, instance_id: …, stops: 100}}
    now: 1000
    expect:
      coder: {verb: start, reason: missing, status: loaded, why: "…", restarts: 0, …}
    order: [stop-me, start-me]          # optional: the decisions' order
    requeue_after: 8                    # optional
    text: |                             # optional: render.text(plan)
    steps:                              # a sequence: each step overrides now/observed/
      - {now: …, observed: …, remembered: …, ctx: …, expect: …}   # remembered/ctx/roles

Defaults: models ``qwen`` (gguf), ``draft`` (gguf), ``mlxq`` (mlx) and
``llama3`` (ollama, ``llama3:8b``); serve programs for llamacpp and mlx-lm;
a remembered managed role's launch digest is the one its current spec gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import yaml

from reconciler.planner import identity
from reconciler.core.decisions import PlanContext
from reconciler.core.desired import (
    sorted_by_name,
    LivenessSpec,
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
from reconciler.core.instances import instances
from reconciler.core.demand import Demand, RoleDemand
from reconciler.core.observed import flat_record
from reconciler.core.observed import (
    ExitInfo,
    Health,
    Liveness,
    Progress,
    Intent,
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
from reconciler.core.devices import (
    Assignment,
    Device,
    DeviceKind,
    DeviceRequest,
    DeviceUse,
    FoundDevice,
    kind_of,
)
from reconciler.core.units import parse_size
from reconciler.planner.launches import device_env
from tests.support.worlds import ENVIRON

GOLDEN = Path(__file__).parent / "golden"
DATA_ROOT = "/var/lib/reconciler/instances"

DEFAULT_MODELS: dict[str, dict[str, Any]] = {
    "qwen": {"format": "gguf", "size": 1000},
    "draft": {"format": "gguf", "size": 100},
    "mlxq": {"format": "mlx", "size": 1000},
    "llama3": {"format": "ollama", "tag": "llama3:8b"},
}


def size(value: Any) -> int:
    return parse_size(value) if value is not None else 0


def model_spec(name: str, data: dict[str, Any]) -> ModelSpec:
    fmt = ModelFormat(data["format"])
    if fmt is ModelFormat.OLLAMA:
        return ModelSpec(name=name, format=fmt, source=ModelSourceInfo(ollama_tag=data["tag"]))
    shard = ModelFile(path=f"{name}.bin", sha256="0" * 64, size=size(data.get("size", 1000)))
    return ModelSpec(name=name, format=fmt, root=f"/models/{name}", shards=(shard,))


def restart_policy(data: dict[str, Any] | None, base: RestartPolicy) -> RestartPolicy:
    return attrs.evolve(base, **(data or {}))


def node_config(data: dict[str, Any] | None) -> NodeConfig:
    data = data or {}
    ports = data.get("allowed_ports")
    return NodeConfig(
        allowed_ports=PortRange(start=ports[0], end=ports[1]) if ports else None,
        memory_budget=size(data["memory_budget"]) if "memory_budget" in data else None,
        serve_programs=((Runtime.LLAMACPP, "/opt/llama-server"), (Runtime.MLX_LM, "/opt/mlx_lm.server")),
        restart=restart_policy(data.get("restart"), RestartPolicy()),
        keep_alive=float(data.get("keep_alive", 1800)),
        devices=tuple(Device(id=i, kind=DeviceKind(kind_of(i)), memory=size(m))
                      for i, m in (data.get("devices") or {}).items()),
    )


def device_request(data: dict[str, Any] | None) -> DeviceRequest | None:
    """A role's ``devices: {count: 1}`` or ``{ids: [cuda:0], split: [3, 1]}`` (§7.1)."""
    if data is None:
        return None
    return DeviceRequest(count=data.get("count"), ids=tuple(data.get("ids", ())),
                         split=tuple(float(w) for w in data.get("split", ())))


def held_devices(data: dict[str, Any] | None) -> tuple[tuple[str, int], ...]:
    return tuple((i, size(b)) for i, b in (data or {}).items())


def role_spec(name: str, data: dict[str, Any], node: NodeConfig) -> RoleSpec:
    runtime = Runtime(data.get("runtime", "llamacpp"))
    default_port = 11434 if runtime is Runtime.OLLAMA else 0
    memory = data.get("memory", {})
    return RoleSpec(
        name=name,
        runtime=runtime,
        mode=Mode(data.get("mode", "managed")),
        model=data.get("model", "llama3" if runtime is Runtime.OLLAMA else "qwen"),
        state=WantedState(data.get("state", "running")),
        serve=ServeSpec(
            port=data.get("port", default_port),
            ctx=data.get("ctx"),
            kv_quant=data.get("kv_quant"),
            draft_model=data.get("draft_model"),
            extra_args=tuple(data.get("extra_args", ())),
        ),
        memory=MemorySpec(weights=size(memory.get("weights")), kv=size(memory.get("kv")),
                          host=size(memory.get("host"))),
        devices=device_request(data.get("devices")),
        excludes=frozenset(e.removeprefix("role:") for e in data.get("excludes", ())),
        restart=restart_policy(data.get("restart"), node.restart),
        keep_alive=data.get("keep_alive", node.keep_alive if runtime is Runtime.OLLAMA else None),
        idle_after=float(data.get("idle_after", 600)),
        liveness=LivenessSpec(**data["liveness"]) if "liveness" in data else None,
        restarted_at=data.get("restarted_at"),
        replicas=data.get("replicas", 1),  # §12 expanded into instances by ``desired``
        shared_by_replicas=data.get("shared_by_replicas", False),
    )


def desired(case: dict[str, Any]) -> Desired:
    node = node_config(case.get("node"))
    models_data = case.get("models", DEFAULT_MODELS)
    models = tuple(model_spec(n, d) for n, d in sorted(models_data.items()))
    roles = sorted_by_name(i for n, d in sorted((case.get("roles") or {}).items())
                           for i in instances(role_spec(n, d, node)))
    elsewhere = tuple((n, tuple(on)) for n, on in sorted((case.get("elsewhere") or {}).items()))
    return Desired(roles=roles, models=models, node=node, placed_elsewhere=elsewhere)


def observation(name: str, data: dict[str, Any]) -> RoleObservation:
    process = None
    if "pid" in data:
        process = ProcessFacts(
            pid=data["pid"],
            create_time=1.0,
            alive=data.get("alive", True),
            owned=data.get("owned", True),
            exit_observed_at=data.get("exit_observed_at"),
        )
    probe = None
    if "health" in data:
        probe = ProbeFacts(
            health=Health(data["health"]),
            detail=data.get("detail", ""),
            listed_models=tuple(data.get("listed", ())),
            resident_models=tuple(data.get("resident", ())),
            timed_out=data.get("timed_out", False),
            progress=Progress(**data["progress"]) if "progress" in data else None,
            progress_timeout=data.get("progress_timeout", ""),
        )
    return RoleObservation(
        name=name,
        process=process,
        probe=probe,
        port_taken=data.get("port_taken", False),
        exposed=tuple(data.get("exposed", ())),
        exit=exit_info(data.get("exit")),
    )


def exit_info(data: dict[str, Any] | None) -> ExitInfo | None:
    if data is None:
        return None
    return ExitInfo(known=data.get("known", False), code=data.get("code"),
                    signal=data.get("signal"), oom=data.get("oom", ""),
                    log=tuple(data.get("log", ())))


def observed(case: dict[str, Any], want: Desired) -> Observed:
    data = case.get("observed") or {}
    states = data.get("models", {})
    checks = []
    for m in want.models:
        raw = states.get(m.name, "verified")
        raw = raw if isinstance(raw, dict) else {"state": raw}
        checks.append(ModelCheck(name=m.name, state=ModelState(raw["state"]), detail=raw.get("detail", "")))
    roles = tuple(observation(n, d or {}) for n, d in sorted((data.get("roles") or {}).items()))
    demand = None
    if "demand" in data:
        demand = Demand(roles=tuple(RoleDemand(role=n, **(d or {}))
                                    for n, d in sorted((data["demand"] or {}).items())),
                        since=data.get("demand_since"))
    orphans = tuple(Orphan(pid=o["pid"], create_time=1.0, instance_id=o["instance_id"],
                           listen=tuple(o.get("listen", ()))) for o in data.get("orphans", ()))
    found = None
    if "devices" in data:  # what discovery found: {"cuda:0": 24GB}
        found = tuple(FoundDevice(id=i, kind=DeviceKind(kind_of(i)), name="gpu", memory=size(m))
                      for i, m in (data["devices"] or {}).items())
    uses = tuple(DeviceUse(pid=int(pid), device=device, used=size(b))
                 for pid, on in (data.get("device_use") or {}).items() for device, b in on.items())
    return Observed(roles=roles, models=tuple(checks), demand=demand, orphans=orphans,
                    devices=found, device_use=uses)


def record(name: str, data: dict[str, Any], want: Desired) -> RoleRecord:
    spec = want.role(name)
    launch_arg = data.get("launch", "current")
    digest, argv = None, ()
    if spec is not None and spec.managed and spec.runtime is not Runtime.OLLAMA and launch_arg != "none":
        old = spec
        if isinstance(launch_arg, dict):
            old = attrs.evolve(spec, serve=attrs.evolve(spec.serve, **launch_arg))
        devices = held_devices(data.get("devices"))
        launcher = identity.Launcher(want.node, dict(ENVIRON), DATA_ROOT)
        assignment = Assignment(ids=tuple(i for i, _ in devices),
                                split=old.devices.split if old.devices else ())
        launch_argv = launcher.argv(old, {m.name: m for m in want.models}, assignment)
        assert launch_argv is not None
        launch = launcher.launch(launch_argv, identity.instance_id(old), None,
                                 device_env(old.runtime, assignment))
        digest, argv = launch.digest, launch.argv
    runtime = Runtime(data.get("runtime", spec.runtime if spec else "llamacpp"))
    return flat_record(
        name=name,
        instance_id=data.get("instance_id", identity.instance_id(spec) if spec else f"{name}-00000000"),
        runtime=runtime,
        mode=Mode(data.get("mode", spec.mode if spec else "managed")),
        port=data.get("port", spec.serve.port if spec else 0),
        model_tag=data.get("model_tag"),
        pid=data.get("pid"),
        create_time=1.0 if data.get("pid") is not None else None,
        launch_digest=digest,
        launch_argv=argv,
        restarts=data.get("restarts", 0),
        started_at=data.get("started_at"),
        exited_at=data.get("exited_at"),
        healthy_since=data.get("healthy_since"),
        terminal=Terminal(data["terminal"]) if data.get("terminal") else None,
        terminal_detail=data.get("terminal_detail", ""),
        we_loaded=data.get("we_loaded", False),
        reserved=size(data.get("reserved", 0)),
        exit=exit_info(data.get("exit")),
        liveness=Liveness(**data.get("liveness", {})),
        # generation: the launch's own unless the record names restarted_at (§4).
        generation=(identity.generation(digest, data["restarted_at"])
                    if digest is not None and data.get("restarted_at")
                    else _load_generation(data["loaded"], data.get("restarted_at"))
                    if "loaded" in data else None),
        restarted_at=data.get("restarted_at"),
        intent=Intent(**data["intent"]) if data.get("intent") else None,
        devices=held_devices(data.get("devices")),
    )


def _load_generation(loaded: dict[str, Any], restarted_at: str | None) -> str:
    """An Ollama record's generation: the tag and keep_alive it loaded (``loaded: {tag, keep_alive}``)."""
    keep = loaded.get("keep_alive")
    return identity.generation(identity.load_runs(loaded["tag"], float(keep) if keep is not None else None),
                               restarted_at)


def remembered(case: dict[str, Any], want: Desired) -> Remembered:
    data = case.get("remembered") or {}
    return Remembered(roles=tuple(record(n, d or {}, want) for n, d in sorted(data.items())))


def context(case: dict[str, Any]) -> PlanContext:
    data = case.get("ctx") or {}
    return PlanContext(
        allow_empty=data.get("allow_empty", False),
        operator_starts=frozenset(data.get("operator_starts", ())),
        environ=ENVIRON,
        data_root=DATA_ROOT,
    )


@attrs.frozen(kw_only=True)
class Step:
    label: str
    desired: Desired
    observed: Observed
    remembered: Remembered
    ctx: PlanContext
    now: float
    data: dict[str, Any]  # the step's own keys (expect, order, text, …)


def steps(case: dict[str, Any], label: str) -> list[Step]:
    """A case as one or more planning steps (``steps:`` entries inherit the top level)."""
    parts = case.get("steps") or [{}]
    out = []
    for i, part in enumerate(parts):
        merged = {**case, **part}
        want = desired(merged)
        out.append(
            Step(
                label=f"{label}[{i}]" if "steps" in case else label,
                desired=want,
                observed=observed(merged, want),
                remembered=remembered(merged, want),
                ctx=context(merged),
                now=float(merged.get("now", 1000)),
                data=merged,
            )
        )
    return out


def load_all() -> dict[str, dict[str, Any]]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(GOLDEN.glob("*.yaml"))}
