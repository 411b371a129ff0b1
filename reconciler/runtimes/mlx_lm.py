"""mlx-lm's ``mlx_lm.server``: command line, flags, probes and answers (PURE).

Launched and managed by the reconciler, or adopted. Its ``/health`` answers
before the model has loaded, so readiness after a start is one completion
(SERVERS.md). Its declaration is ``SPEC`` at the end of this module.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs

from reconciler.core.desired import ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime
from reconciler.core.observed import Health, ProbeFacts
from reconciler.runtimes.common import (
    ErrorKind,
    Exchange,
    ProbeAnswer,
    ProbeContext,
    ProbeRequest,
    argv_value,
    error_message,
    failure_detail,
    hi_messages,
    unreachable,
)
from reconciler.core.devices import DeviceKind
from reconciler.runtimes.flags import FlagTable, render
from reconciler.runtimes.mlx_lm_flags import TABLE
from reconciler.runtimes.spec import CommandLine, DeviceLaunch, RuntimeSpec


def _root(model: ModelSpec | None) -> str:
    return model.root if model is not None and model.root else "<model not declared>"


def argv(role: RoleSpec, model: ModelSpec | None, draft: ModelSpec | None = None,
         weights: Mapping[str, ModelSpec] | None = None,
         table: FlagTable = TABLE) -> tuple[str, ...]:
    """``--model <abs root>``; identity is read back from exactly this argv. A draft
    model and an adapter are Models too (their roots)."""
    serve = role.serve
    args = ["--model", _root(model), "--host", serve.host, "--port", str(serve.port)]
    if serve.draft_model is not None:
        args += ["--draft-model", _root(draft)]
    if serve.adapter is not None:
        args += ["--adapter-path", _root((weights or {}).get(serve.adapter))]
    return (*args, *render(role, table))


# ---------------------------------------------------------------- probes

HEALTH = ProbeRequest(method="GET", path="/health")
#: Readiness after a start: /health is 200 before the model has loaded, a
#: one-token completion without ``model`` is not (SERVERS.md).
COMPLETION = ProbeRequest(
    method="POST", path="/v1/completions", body={"prompt": "hi", "max_tokens": 1}
)

_THREAD_DIED = "generation thread died"


def exchange(ctx: ProbeContext) -> Exchange:
    """``/health``; while awaiting readiness after a start, also one completion.

    The POST is never sent to an adopted server.
    """
    (health,) = yield (HEALTH,)
    out = {HEALTH.path: health}
    if ctx.readiness and not ctx.adopted and health.ok:
        (completion,) = yield (COMPLETION,)
        out[COMPLETION.path] = completion
    return out


def read(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts:
    """mlx_lm.server's answers → facts. Identity is the launched ``--model``."""
    health = answers[HEALTH.path]
    identity = argv_model(ctx.launch_argv)
    if not health.answered:
        return unreachable(HEALTH, health, ctx, identity=identity)
    base = ProbeFacts(
        health=Health.UP, detail="healthy", identity=identity, latency=health.latency
    )
    if health.status == 503:
        return attrs.evolve(
            base, health=Health.UNHEALTHY, detail=f"{_THREAD_DIED} (/health answered 503)"
        )
    if not health.ok:
        return attrs.evolve(base, health=Health.UNHEALTHY, detail=failure_detail(HEALTH, health))
    completion = answers.get(COMPLETION.path)
    if completion is None:
        return base
    if completion.ok:
        return attrs.evolve(base, detail="ready: answered a one-token completion")
    if completion.error is ErrorKind.TIMEOUT:
        return attrs.evolve(
            base, health=Health.LOADING,
            detail=f"loading model (no one-token completion {completion.error_detail})",
        )
    if completion.error is not None:
        return unreachable(COMPLETION, completion, ctx, identity=identity)
    if _THREAD_DIED in error_message(completion).lower():
        return attrs.evolve(base, health=Health.UNHEALTHY, detail=_THREAD_DIED)
    return attrs.evolve(
        base, health=Health.UNHEALTHY, detail=failure_detail(COMPLETION, completion)
    )


def argv_model(argv: Sequence[str]) -> str | None:
    """The ``--model`` value of a launch argv (separate arguments, as launched)."""
    return argv_value(argv, "--model")


def deep_request() -> ProbeRequest:
    """One token, WITHOUT ``model``: mlx-lm would load whatever a request names."""
    body = {"messages": hi_messages(), "max_tokens": 1, "stream": False}
    return ProbeRequest(method="POST", path="/v1/chat/completions", body=body)


def _deep(role: RoleSpec, model: ModelSpec | None, node: NodeConfig,
          listed: tuple[str, ...]) -> ProbeRequest:
    return deep_request()


def _no_name(role: RoleSpec, model: ModelSpec | None) -> None:
    return None  # /v1/models lists the HF cache too: it says nothing about what is loaded


SPEC = RuntimeSpec(
    runtime=Runtime.MLX_LM,
    title="mlx-lm (mlx_lm.server)",
    version_of_process=True,  # §14 no version over HTTP
    launched=True,
    managed=True,
    shared_endpoint=False,
    loads_models=False,
    slots=1,  # §9.1 mlx_lm.server answers one generation at a time
    default_port=None,
    formats=frozenset({ModelFormat.MLX, ModelFormat.SAFETENSORS}),
    serve_options=frozenset({"draft_model", "adapter"}),
    flags=TABLE,
    env_names=("MLX_*", "OMP_*"),
    argv=argv,
    exchange=exchange,
    read=read,
    readiness=COMPLETION,
    wanted=_no_name,
    identity="the launch argv's --model",
    deep_request=_deep,
    # Apple silicon: one GPU on unified memory; nothing to make visible, nothing to split.
    devices=DeviceLaunch(kinds=frozenset({DeviceKind.METAL})),
    command_line=CommandLine(programs=("mlx_lm.server",), modules=("mlx_lm.server", "mlx_lm"),
                             hub_models=True),
)
