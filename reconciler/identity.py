"""Instance ids, launches and launch digests (PURE; BEHAVIOUR §3, §6).

``launch()`` builds the exact argv, environment, working directory and uid a
managed server is started with. The caller (the shell) passes the
reconciler's own environment in as a value, so this stays pure and the
digest is reproducible in tests.
"""

from __future__ import annotations

import hashlib
import json
from typing import Mapping

from reconciler.desired import Launch, ModelSpec, NodeConfig, RoleSpec
from reconciler.runtimes import launch_argv, spec_of

MARKER_ENV = "RECONCILER_INSTANCE"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def instance_id(role: RoleSpec) -> str:
    """``<name>-<8 hex of sha256(name|runtime|model|host:port|mode)>``."""
    key = "|".join(
        [role.name, str(role.runtime), role.model or "", role.serve.address, str(role.mode)]
    )
    return f"{role.name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def child_env(
    node: NodeConfig, environ: Mapping[str, str], instance: str
) -> tuple[tuple[str, str], ...]:
    """The child's environment, built from nothing (BEHAVIOUR §6).

    Order of precedence: the default PATH, then NodeConfig ``env``, then each
    passthrough variable that is set (an explicit or passed-through PATH
    wins over the default), then the ownership marker, which nothing overrides.
    """
    env: dict[str, str] = {"PATH": DEFAULT_PATH}
    env.update(dict(node.env))
    for name in node.env_passthrough:
        if name in environ:
            env[name] = environ[name]
    env[MARKER_ENV] = instance
    return tuple(sorted(env.items()))


def launch(
    role: RoleSpec,
    models: Mapping[str, ModelSpec],
    node: NodeConfig,
    environ: Mapping[str, str],
    data_root: str,
) -> Launch | None:
    """The canonical launch of a managed role, or None (a runtime it never launches)."""
    if not spec_of(role.runtime).launched or not role.managed:
        return None
    program = node.serve_program(role.runtime) or f"<no serve_programs.{role.runtime}>"
    model = models.get(role.model or "")
    draft = models.get(role.serve.draft_model or "")
    argv = (program, *launch_argv(role, model, draft))
    instance = instance_id(role)
    env = child_env(node, environ, instance)
    cwd = f"{data_root.rstrip('/')}/{instance}"
    # Passed-through values (HOME, PATH, …) come from whoever runs the
    # reconciler: cron, systemd and an operator's shell differ. The digest
    # names them but ignores their values, so running `reconcile --once` from
    # another shell restarts nothing; a server takes them when it (re)starts.
    passed = {name for name in node.env_passthrough if name in environ}
    digest_env = [(k, "<passed through>" if k in passed else v) for k, v in env]
    canonical = json.dumps(
        {
            "argv": argv,
            "env": digest_env,
            "cwd": cwd,
            "run_as": [node.run_as.uid, node.run_as.gid] if node.run_as else None,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return Launch(argv=argv, env=env, cwd=cwd, run_as=node.run_as, digest=digest)


def argv_changes(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    """A short description of what changed between two launches' argv.

    ``ctx 4096 → 8192`` style, flag by flag; falls back to "launch changed".
    """
    def flags(argv: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {"program": argv[0] if argv else ""}
        i = 1
        while i < len(argv):
            tok = argv[i]
            if tok.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[tok] = argv[i + 1]
                i += 2
            else:
                out[tok] = ""
                i += 1
        return out

    a, b = flags(old), flags(new)
    parts = []
    for key in sorted(set(a) | set(b), key=lambda k: (k != "program", k)):
        if a.get(key) != b.get(key):
            label = _FLAG_LABELS.get(key, key.lstrip("-"))
            parts.append(f"{label} {a.get(key, '(none)') or 'on'} → {b.get(key, '(none)') or 'on'}")
    parts = list(dict.fromkeys(parts))  # --cache-type-k and -v share one label
    return ", ".join(parts) if parts else "launch environment changed"


_FLAG_LABELS = {
    "--ctx-size": "ctx",
    "--model": "model",
    "--port": "port",
    "--host": "host",
    "--cache-type-k": "kv_quant",
    "--cache-type-v": "kv_quant",
    "--model-draft": "draft_model",
    "--alias": "alias",
}
