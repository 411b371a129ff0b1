"""One pure module per runtime, sharing one vocabulary (PURE).

Each runtime module knows its server's command line, its probe requests and
how to read the answers. Nothing here opens a socket: the observer sends the
requests these modules describe and hands the answers back to be parsed.
"""

from __future__ import annotations

from reconciler.desired import ModelSpec, RoleSpec, Runtime
from reconciler.runtimes import llamacpp, mlx_lm

def launch_argv(role: RoleSpec, model: ModelSpec | None, draft: ModelSpec | None) -> tuple[str, ...]:
    """The server's arguments (without the program) for a managed role."""
    if role.runtime is Runtime.LLAMACPP:
        return llamacpp.argv(role, model, draft)
    if role.runtime is Runtime.MLX_LM:
        return mlx_lm.argv(role, model)
    raise ValueError(f"runtime {role.runtime} is never launched")
