"""llama.cpp's ``llama-server``: command line, probes and answers (PURE)."""

from __future__ import annotations

from reconciler.model import ModelSpec, RoleSpec


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
