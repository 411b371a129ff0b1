"""Any OpenAI-compatible server, observed only: probes and answers (PURE).

vLLM, SGLang, TGI, LocalAI, llama-swap, a llama-server or mlx_lm.server someone
else runs: the reconciler never launches, stops or loads anything on them
(``mode: adopted`` only, no ``extra_args``) and sends them only GETs.

* readiness: ``GET /health`` — 200 up, 503 loading, anything else unhealthy; a
  server without it (404) is judged by ``GET /v1/models`` instead;
* identity: the ids ``GET /v1/models`` lists; the wanted one is the role's
  Model name, when it names one (a path-like id matches by its last segment);
* deep health (``reconcile health NAME --deep``, an operator's explicit
  request): one-token ``POST /v1/chat/completions`` naming the listed id.

llama.cpp's reader builds on this one (llama-server is such a server, plus
``/props``). The declaration is ``SPEC`` at the end of this module.
"""

from __future__ import annotations

from typing import Any, Mapping

from reconciler.core.desired import (ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime,
                                     document_name)
from reconciler.core.observed import Health, ProbeFacts
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
from reconciler.runtimes.spec import RuntimeSpec

HEALTH = ProbeRequest(method="GET", path="/health")
MODELS = ProbeRequest(method="GET", path="/v1/models")


def exchange(ctx: ProbeContext) -> Exchange:
    """``/health`` (404 → ``/v1/models`` decides); once up, ``/v1/models``. GETs only."""
    (health,) = yield (HEALTH,)
    out = {HEALTH.path: health}
    if health.ok or health.status == 404:
        (models,) = yield (MODELS,)
        out[MODELS.path] = models
    return out


def model_ids(body: Any) -> tuple[str, ...]:
    """``data[].id`` of ``/v1/models`` (plus ``models[].name``/``.model`` of newer servers)."""
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


def read(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts:
    """200 up, 503 loading; up and a model wanted: it must be listed.

    Identity is the listed id the wanted name matches (or the only one listed).
    """
    verdict = gate(answers, ctx)
    if verdict is not None:
        return verdict
    models = answers.get(MODELS.path, ProbeAnswer())
    unlisted = None if models.ok else f"cannot list models: {failure_detail(MODELS, models)}"
    listed = model_ids(models.body) if models.ok else ()
    return listing(listed, ctx, latency=answers[HEALTH.path].latency, unlisted=unlisted)


def gate(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts | None:
    """The verdict of ``/health`` (or ``/v1/models`` where it is 404) when not up; None: up."""
    health = answers[HEALTH.path]
    gate, gate_request = health, HEALTH
    if health.status == 404:  # no /health: /v1/models decides
        gate, gate_request = answers.get(MODELS.path, ProbeAnswer()), MODELS
    if not gate.answered:
        return unreachable(gate_request, gate, ctx)
    if gate.status == 503:
        return ProbeFacts(health=Health.LOADING, detail="loading model", latency=health.latency)
    if not gate.ok:
        return ProbeFacts(health=Health.UNHEALTHY, detail=failure_detail(gate_request, gate),
                          latency=health.latency)
    return None


def listing(listed: tuple[str, ...], ctx: ProbeContext, *, latency: float | None,
            unlisted: str | None = None) -> ProbeFacts:
    """Facts of a server that is up and lists ``listed`` (``unlisted``: why it could not);
    its identity: the listed id the wanted name matches, or the only one listed.
    (Built once, not built and then changed: the observer reads every server every pass.)
    """
    matched = listed_match(ctx.wanted, listed) if ctx.wanted else None
    health, detail = Health.UP, "healthy"
    if ctx.wanted:
        detail = f"healthy; serving {ctx.wanted}"
        if matched is None:
            health, detail = Health.UNHEALTHY, f"model {ctx.wanted} is not listed by the server"
        if unlisted is not None:  # (it lists nothing)
            health, detail = Health.UNHEALTHY, unlisted
    return ProbeFacts(health=health, detail=detail, listed_models=listed, latency=latency,
                      identity=matched or (listed[0] if len(listed) == 1 else None))


def chat_request(model: str | None) -> ProbeRequest:
    """One token, not streamed; ``model`` is left out when there is none to name."""
    body: dict[str, Any] = {"messages": hi_messages(), "max_tokens": 1, "stream": False}
    if model is not None:
        body = {"model": model, **body}
    return ProbeRequest(method="POST", path="/v1/chat/completions", body=body)


def wanted(role: RoleSpec, model: ModelSpec | None) -> str | None:
    """The role's Model name, when it names one: the id the server should list."""
    return document_name(role.model) if role.model else role.model


def _deep(role: RoleSpec, model: ModelSpec | None, node: NodeConfig,
          listed: tuple[str, ...]) -> ProbeRequest:
    # Name the id the server itself lists for the role's model, when it was seen.
    name = document_name(role.model) if role.model else role.model
    return chat_request((listed_match(name, listed) or name) if name else None)


SPEC = RuntimeSpec(
    runtime=Runtime.OPENAI,
    title="OpenAI-compatible servers",
    launched=False,
    managed=False,
    shared_endpoint=False,
    loads_models=False,
    default_port=None,
    # Whatever the server loads is its own business: a role may name any Model.
    formats=frozenset(ModelFormat),
    exchange=exchange,
    read=read,
    wanted=wanted,
    identity="GET /v1/models ids (the one the role's Model name matches)",
    deep_request=_deep,
)
