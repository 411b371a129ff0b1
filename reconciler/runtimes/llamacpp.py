"""llama.cpp's ``llama-server``: command line, flags, probes and answers (PURE).

Launched and managed by the reconciler, or adopted. Its declaration is ``SPEC``
at the end of this module.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from reconciler.desired import ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime
from reconciler.observed import Health, ProbeFacts
from reconciler.runtimes.common import (
    Exchange,
    ProbeAnswer,
    ProbeContext,
    ProbeRequest,
    failure_detail,
    hi_messages,
    json_list,
    listed_match,
    unreachable,
)
from reconciler.runtimes.spec import Flag, RuntimeSpec, flag_table


def model_path(model: ModelSpec | None) -> str:
    """The absolute path of the first shard: llama-server finds the rest itself."""
    if model is None or model.root is None or not model.shards:
        return "<model not declared>"
    return f"{model.root.rstrip('/')}/{model.shards[0].path}"


def argv(role: RoleSpec, model: ModelSpec | None, draft: ModelSpec | None) -> tuple[str, ...]:
    """BEHAVIOUR §2: the reconciler owns host, port, model, draft, ctx and kv flags."""
    serve = role.serve
    args = ["--model", model_path(model), "--host", serve.host, "--port", str(serve.port)]
    if serve.ctx is not None:
        args += ["--ctx-size", str(serve.ctx)]
    if serve.kv_quant is not None:
        args += ["--cache-type-k", serve.kv_quant, "--cache-type-v", serve.kv_quant]
    if serve.draft_model is not None:
        args += ["--model-draft", model_path(draft)]
    args += ["--alias", role.model or role.name]
    args += list(serve.extra_args)
    return tuple(args)


#: BEHAVIOUR §1.4. llama-server's flags move between releases: this table is
#: checked against the server the tests run (tests/manifests/test_extra_args.py).
FLAGS = flag_table(
    (Flag(1), ("--threads", "-t", "--threads-batch", "-tb", "--batch-size", "-b",
               "--ubatch-size", "-ub", "--parallel", "-np", "--n-gpu-layers", "-ngl",
               "--temp", "--top-p", "--top-k", "--repeat-penalty", "--seed")),
    (Flag(1, ("on", "off", "auto")), ("--flash-attn", "-fa")),
    (Flag(0), ("--cont-batching", "--no-cont-batching", "--jinja", "--metrics", "--no-webui")),
)


# ---------------------------------------------------------------- probes

HEALTH = ProbeRequest(method="GET", path="/health")
MODELS = ProbeRequest(method="GET", path="/v1/models")
PROPS = ProbeRequest(method="GET", path="/props")


def exchange(ctx: ProbeContext) -> Exchange:
    """``/health`` (404 → ``/v1/models``); once up, the listed models and ``/props``.

    Every request is a GET, so adopted servers are probed the same way.
    """
    (health,) = yield (HEALTH,)
    out = {HEALTH.path: health}
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


def listed_ids(body: Any) -> tuple[str, ...]:
    """``data[].id`` of ``/v1/models`` (plus ``models[].name`` of newer servers)."""
    names: list[str] = []
    for item in json_list(body, "data"):
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            names.append(item["id"])
    for item in json_list(body, "models"):
        if isinstance(item, dict):
            for key in ("name", "model"):
                if isinstance(item.get(key), str):
                    names.append(item[key])
    return tuple(dict.fromkeys(names))


def props_model_path(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("model_path"), str):
        return body["model_path"]
    return None


def read(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts:
    """llama-server's answers → facts: 200 up, 503 loading, the alias listed or not."""
    health = answers[HEALTH.path]
    gate, gate_request = health, HEALTH
    if health.status == 404:  # an older server without /health: /v1/models decides
        gate, gate_request = answers.get(MODELS.path, ProbeAnswer()), MODELS
    if not gate.answered:
        return unreachable(gate_request, gate, ctx)
    latency = health.latency
    if gate.status == 503:
        return ProbeFacts(health=Health.LOADING, detail="loading model", latency=latency)
    if not gate.ok:
        return ProbeFacts(
            health=Health.UNHEALTHY, detail=failure_detail(gate_request, gate), latency=latency
        )
    models = answers.get(MODELS.path, ProbeAnswer())
    props = answers.get(PROPS.path, ProbeAnswer())
    listed = listed_ids(models.body) if models.ok else ()
    identity = props_model_path(props.body) if props.ok else None
    facts = ProbeFacts(
        health=Health.UP, detail="healthy", listed_models=listed, identity=identity,
        latency=latency,
    )
    if ctx.wanted:
        if not models.ok:
            detail = f"cannot list models: {failure_detail(MODELS, models)}"
            return attrs.evolve(facts, health=Health.UNHEALTHY, detail=detail)
        if listed_match(ctx.wanted, listed) is None:
            detail = f"model {ctx.wanted} is not listed by the server"
            return attrs.evolve(facts, health=Health.UNHEALTHY, detail=detail)
        facts = attrs.evolve(facts, detail=f"healthy; serving {ctx.wanted}")
    return facts


def deep_request(alias: str) -> ProbeRequest:
    """One token from the alias this reconciler launched the server with."""
    body = {"model": alias, "messages": hi_messages(), "max_tokens": 1, "stream": False}
    return ProbeRequest(method="POST", path="/v1/chat/completions", body=body)


def wanted(role: RoleSpec, model: ModelSpec | None) -> str | None:
    """The alias a managed launch passes (``--alias``); adopted: the declared model."""
    return role.model or role.name if role.managed else role.model


def _deep(role: RoleSpec, model: ModelSpec | None, node: NodeConfig,
          listed: tuple[str, ...]) -> ProbeRequest:
    return deep_request(role.model or role.name)


SPEC = RuntimeSpec(
    runtime=Runtime.LLAMACPP,
    title="llama.cpp (llama-server)",
    launched=True,
    managed=True,
    shared_endpoint=False,
    loads_models=False,
    default_port=None,
    formats=frozenset({ModelFormat.GGUF}),
    serve_options=frozenset({"ctx", "kv_quant", "draft_model"}),
    flags=FLAGS,
    argv=argv,
    exchange=exchange,
    read=read,
    wanted=wanted,
    identity="GET /v1/models ids (the alias) and GET /props model_path",
    deep_request=_deep,
)
