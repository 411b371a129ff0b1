"""mlx-lm's ``mlx_lm.server``: command line, probes and answers (PURE)."""

from __future__ import annotations

from reconciler.model import ModelSpec, RoleSpec


def argv(role: RoleSpec, model: ModelSpec | None) -> tuple[str, ...]:
    """``--model <abs root>``; identity is read back from exactly this argv."""
    root = model.root if model is not None and model.root else "<model not declared>"
    serve = role.serve
    return ("--model", root, "--host", serve.host, "--port", str(serve.port), *serve.extra_args)
