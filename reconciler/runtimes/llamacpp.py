"""llama.cpp's ``llama-server``: command line, flags, probes and answers (PURE).

Launched and managed by the reconciler, or adopted. Its declaration is ``SPEC``
at the end of this module.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from reconciler.core.desired import (ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime,
                                     document_name)
from reconciler.core.observed import ProbeFacts, Progress
from reconciler.runtimes import openai
from reconciler.runtimes.common import (
    Exchange,
    ProbeAnswer,
    ProbeContext,
    ProbeRequest,
    argv_value,
)
from reconciler.core.devices import DeviceKind
from reconciler.runtimes.flags import FlagTable, render
from reconciler.runtimes.llamacpp_flags import TABLE
from reconciler.runtimes.spec import CommandLine, DeviceLaunch, ProgressProbe, RuntimeSpec


def model_path(model: ModelSpec | None) -> str:
    """The absolute path of the first shard: llama-server finds the rest itself."""
    if model is None or model.root is None or not model.shards:
        return "<model not declared>"
    return f"{model.root.rstrip('/')}/{model.shards[0].path}"


#: ``spec.serve.slot_save``: where the server saves slots, inside its instance directory.
SLOT_DIR = "slots"


def work_dirs(role: RoleSpec) -> tuple[str, ...]:
    return (SLOT_DIR,) if role.serve.slot_save else ()


def argv(role: RoleSpec, model: ModelSpec | None, draft: ModelSpec | None,
         weights: Mapping[str, ModelSpec] | None = None,
         table: FlagTable = TABLE) -> tuple[str, ...]:
    """BEHAVIOUR §2: the reconciler owns host, port, model, draft, ctx, cache types,
    the weight files (``weights``: the role's other Models by name) and the API key.
    ``table``: the flag table of the build that runs it (its ``--flag=value`` entries)."""
    serve = role.serve
    weights = weights or {}
    args = ["--model", model_path(model), "--host", serve.host, "--port", str(serve.port)]
    if serve.ctx is not None:
        args += ["--ctx-size", str(serve.ctx)]
    cache_k = serve.cache_type_k or serve.kv_quant
    cache_v = serve.cache_type_v or serve.kv_quant
    if cache_k is not None:
        args += ["--cache-type-k", cache_k]
    if cache_v is not None:
        args += ["--cache-type-v", cache_v]
    if serve.draft_model is not None:
        args += ["--model-draft", model_path(draft)]
    if serve.mmproj is not None:
        args += ["--mmproj", model_path(weights.get(serve.mmproj))]
    if serve.loras:
        args += ["--lora-scaled", ",".join(f"{model_path(weights.get(x.model))}:{x.scale:g}"
                                           for x in serve.loras)]
    if serve.api_key_file is not None:
        args += ["--api-key-file", serve.api_key_file]
    if serve.slot_save:
        args += ["--slot-save-path", SLOT_DIR]
    args += ["--alias", _served(role)]
    args += list(render(role, table))
    return tuple(args)


#: The launch follows the planner's assignment: the server sees only its devices
#: (by the kind's visibility variable) and splits the model by ``--tensor-split``.
#: llama.cpp's own device flags are the planner's once a role sets placement.devices.
DEVICES = DeviceLaunch(
    kinds=frozenset(DeviceKind),
    visibility={DeviceKind.CUDA: "CUDA_VISIBLE_DEVICES", DeviceKind.ROCM: "HIP_VISIBLE_DEVICES",
                DeviceKind.VULKAN: "GGML_VK_VISIBLE_DEVICES"},
    order={DeviceKind.CUDA: (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)},
    split_flag="--tensor-split",
    owned_flags=frozenset({"--device", "-dev", "--tensor-split", "-ts", "--split-mode", "-sm",
                           "--main-gpu", "-mg"}),
)


# ---------------------------------------------------------------- probes

HEALTH, MODELS = openai.HEALTH, openai.MODELS
PROPS = ProbeRequest(method="GET", path="/props")


def exchange(ctx: ProbeContext) -> Exchange:
    """``/health`` (404 → ``/v1/models``); once up, the listed models and ``/props``.

    Our own server that has answered healthy since it was created (``ctx.settled``)
    is asked ``/health`` only: it serves the alias and model it was launched with.
    Every request is a GET, so adopted servers are probed the same way.
    """
    (health,) = yield (HEALTH,)
    out = {HEALTH.path: health}
    if ctx.settled and health.status != 404:
        if ctx.version and health.ok:  # §14 its build, against the Program's version
            (props,) = yield (PROPS,)
            out[PROPS.path] = props
        return out
    if health.status == 404:
        (models,) = yield (MODELS,)
        out[MODELS.path] = models
        if models.ok:
            (props,) = yield (PROPS,)
            out[PROPS.path] = props
    elif health.ok:
        models, props = yield (MODELS, PROPS)
        out[MODELS.path] = models
        out[PROPS.path] = props
    return out


def props_model_path(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("model_path"), str):
        return body["model_path"]
    return None


def read(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts:
    """llama-server's answers → facts: read as any OpenAI-compatible server's (200 up,
    503 loading, the alias listed or not), the identity from ``/props`` ``model_path``;
    a settled server of ours from its launch (it lists ``--alias``, loaded ``--model``)."""
    if ctx.settled and MODELS.path not in answers:
        verdict = openai.gate(answers, ctx)
        if verdict is not None:
            return verdict
        alias = argv_value(ctx.launch_argv, "--alias")
        facts = openai.listing((alias,) if alias else (), ctx,
                               latency=answers[HEALTH.path].latency)
        return attrs.evolve(facts, identity=argv_value(ctx.launch_argv, "--model"),
                            version=props_build(answers.get(PROPS.path)))
    props = answers.get(PROPS.path, ProbeAnswer())
    identity = props_model_path(props.body) if props.ok else None
    return attrs.evolve(openai.read(answers, ctx), identity=identity,
                        version=props_build(props))


def props_build(props: ProbeAnswer | None) -> str | None:
    """§14 ``/props`` ``build_info`` (``b11434-4f0e1a2``; a source tarball's ``b0-unknown``)."""
    if props is None or not props.ok or not isinstance(props.body, dict):
        return None
    info = props.body.get("build_info")
    return info if isinstance(info, str) else None


def deep_request(alias: str) -> ProbeRequest:
    """One token from the alias this reconciler launched the server with."""
    return openai.chat_request(alias)


def wanted(role: RoleSpec, model: ModelSpec | None) -> str | None:
    """The alias a managed launch passes (``--alias``); adopted: the declared model."""
    return _served(role) if role.managed else role.model


def _served(role: RoleSpec) -> str:
    """The name the server answers to: its Model's own name (§13: a kept one's too)."""
    return document_name(role.model or role.name)


# ---------------------------------------------------------------- progress (§4.1)

#: llama-server's Prometheus exposition (only with ``--metrics``). The server
#: answers it from its main loop: a wedged loop leaves it unanswered.
METRICS = ProbeRequest(method="GET", path="/metrics", text_limit=65536)
IN_FLIGHT = "llamacpp:requests_processing"
#: ``llama_decode()`` calls: moves with every prompt batch and generated token.
DECODED = "llamacpp:n_decode_total"


def metrics_asked(role: RoleSpec) -> bool:
    """Does the launch expose ``/metrics``? (An operator's choice: ``extra_args``.)"""
    return "--metrics" in role.serve.extra_args


def read_progress(answer: ProbeAnswer) -> Progress | None:
    """Requests in flight and the decode counter from ``/metrics``; None without both."""
    if not answer.ok:
        return None
    values: dict[str, float] = {}
    for line in answer.text.splitlines():
        name, _, value = line.partition(" ")
        if name in (IN_FLIGHT, DECODED):
            try:
                values[name] = float(value.split()[0])
            except (IndexError, ValueError):
                return None
    if IN_FLIGHT not in values or DECODED not in values:
        return None
    return Progress(in_flight=values[IN_FLIGHT], decoded=values[DECODED])


def _deep(role: RoleSpec, model: ModelSpec | None, node: NodeConfig,
          listed: tuple[str, ...]) -> ProbeRequest:
    return deep_request(_served(role))


def _modernise(words: list[str], find):  # type: ignore[no-untyped-def]
    """``llamacpp_older.modernise``, imported by ``reconcile import`` alone (its tables, notes)."""
    from reconciler.runtimes import llamacpp_older

    return llamacpp_older.modernise(words, find)


SPEC = RuntimeSpec(
    runtime=Runtime.LLAMACPP,
    title="llama.cpp (llama-server)",
    launched=True,
    managed=True,
    shared_endpoint=False,
    loads_models=False,
    default_port=None,
    formats=frozenset({ModelFormat.GGUF}),
    serve_options=frozenset({"ctx", "kv_quant", "cache_type_k", "cache_type_v", "draft_model",
                             "mmproj", "loras", "api_key_file", "slot_save"}),
    flags=TABLE,
    work_dirs=work_dirs,
    env_names=("GGML_*", "HIP_*", "HSA_*", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
               "CUDA_DEVICE_ORDER", "OMP_*", "MTMD_BACKEND_DEVICE"),
    argv=argv,
    exchange=exchange,
    read=read,
    wanted=wanted,
    identity="GET /v1/models ids (the alias) and GET /props model_path",
    deep_request=_deep,
    progress=ProgressProbe(request=METRICS, asked=metrics_asked, read=read_progress),
    devices=DEVICES,
    command_line=CommandLine(programs=("llama-server",), modernise=_modernise),
)
