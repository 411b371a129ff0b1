"""A NodeConfig document → ``NodeConfig``, with the checks its schema cannot make (PURE).

What one node is: its port allowlist, memory budget, devices, restart defaults,
labels, and its loopback listeners (status page, router, metrics) and fetch
settings, each field's check beside its parse. The reader and the parts a
NodeConfig shares with roles (restart policy, labels) are ``documents``'.
"""

from __future__ import annotations

import attrs

from reconciler.core import loopback
from reconciler.core.desired import (
    FetchConfig,
    NodeConfig,
    PortRange,
    RouterConfig,
    RunAs,
    Runtime,
    StatusPageConfig,
)
from reconciler.core.errors import Problem
from reconciler.manifests import devicedocs
from reconciler.manifests.documents import _labels, _mirror, _Reader, _restart
from reconciler.manifests.yamlsafe import Document


def node_config(doc: Document) -> tuple[NodeConfig | None, list[Problem]]:
    r = _Reader(doc)
    ports = r.get("spec", "allowed_ports")
    allowed = None
    if ports is not None:
        allowed = PortRange(start=int(ports["from"]), end=int(ports["to"]))
        if allowed.start > allowed.end:
            r.add(("spec", "allowed_ports"),
                  f"'from' ({allowed.start}) must not be above 'to' ({allowed.end})")
    run_as = r.get("spec", "run_as")
    defaults = NodeConfig()
    timeouts = {}
    for field in ("probe_timeout", "deep_timeout", "stop_grace"):
        value = r.duration("spec", field)
        if value is not None and value == 0 and field != "stop_grace":
            r.add(("spec", field), "must be more than 0 seconds")
        timeouts[field] = getattr(defaults, field) if value is None else value
    keep_alive = r.duration("spec", "keep_alive", negative=True)
    passthrough = r.get("spec", "env_passthrough")  # [] means "pass nothing through"
    node_labels = _labels(r, ("metadata", "labels"))
    node = NodeConfig(
        name=str(r.get("metadata", "name") or ""),
        labels=tuple(sorted(node_labels.items())),
        model_roots=tuple(sorted((r.get("spec", "model_roots") or {}).items())),
        allowed_ports=allowed,
        memory_budget=r.size("spec", "memory_budget"),
        serve_programs=tuple(sorted(
            (Runtime(k), v) for k, v in (r.get("spec", "serve_programs") or {}).items())),
        version_probe=tuple(sorted(
            (Runtime(k), tuple(v)) for k, v in (r.get("spec", "version_probe") or {}).items())),
        env=tuple(sorted((r.get("spec", "env") or {}).items())),
        env_passthrough=tuple(passthrough) if passthrough is not None
        else defaults.env_passthrough,
        run_as=RunAs(uid=int(run_as["uid"]), gid=int(run_as["gid"])) if run_as else None,
        restart=attrs.evolve(defaults.restart, **dict(_restart(r, "spec", "restart"))),
        keep_alive=defaults.keep_alive if keep_alive is None else keep_alive,
        data_root=r.get("spec", "data_root"),
        router=_router(r),
        status_page=_status_page(r),
        devices=devicedocs.node_devices(r),
        fetch=_fetch(r),
        ref=r.ref,
        **timeouts,
    )
    return (None if r.problems else node), r.problems


def _loopback(r: _Reader, key: str, listen) -> tuple[str, int]:
    """``spec.<key>.listen`` as (host, port); a host beyond loopback is a problem."""
    host, _, port_text = str(listen).rpartition(":")
    host = loopback.LOCALHOST_ADDRESS if host == loopback.LOCALHOST else host.strip("[]")
    what = "the router" if key == "router" else "the status page"
    if not loopback.is_loopback_host(host):
        r.add(("spec", key, "listen"),
              f"{host!r} is not a loopback address; {what} never listens beyond loopback")
    port = int(port_text)
    if not 1 <= port <= 65535:
        r.add(("spec", key, "listen"), f"port {port} is not in 1-65535")
    return host, port


def _status_page(r: _Reader) -> StatusPageConfig | None:
    """§11 ``spec.status_page``: a loopback listen address (the schema checked its shape)."""
    raw = r.get("spec", "status_page")
    if raw is None:
        return None
    host, port = _loopback(r, "status_page", raw["listen"])
    return StatusPageConfig(host=host, port=port, api_key_file=raw.get("api_key_file"))


def _fetch(r: _Reader) -> FetchConfig | None:
    """§1.6 ``spec.fetch``: this node downloads Models with a source into ``cache``."""
    raw = r.get("spec", "fetch")
    if raw is None:
        return None
    defaults = FetchConfig()
    min_free = r.size("spec", "fetch", "min_free")
    _mirror(r, ("spec", "fetch", "hf_endpoint"), raw.get("hf_endpoint"))
    return FetchConfig(
        cache=raw["cache"],
        max_parallel=int(raw.get("max_parallel", defaults.max_parallel)),
        hf_endpoint=str(raw.get("hf_endpoint", defaults.hf_endpoint)).rstrip("/"),
        hf_token_file=raw.get("hf_token_file"),
        min_free=defaults.min_free if min_free is None else min_free,
    )


def _router(r: _Reader) -> RouterConfig | None:
    """§9 ``spec.router``: a loopback listen address (the schema checked its shape)."""
    raw = r.get("spec", "router")
    if raw is None:
        return None
    defaults = RouterConfig()
    host, port = _loopback(r, "router", raw["listen"])
    timeout = r.duration("spec", "router", "queue_timeout")
    if timeout == 0:
        r.add(("spec", "router", "queue_timeout"), "must be more than 0 seconds")
    body = r.size("spec", "router", "max_body")
    if body == 0:
        r.add(("spec", "router", "max_body"), "must be more than 0 bytes")
    durations = {}
    for field in ("idle_timeout", "body_timeout", "drain_timeout", "min_residency"):
        value = r.duration("spec", "router", field)
        if value == 0 and field != "min_residency":
            r.add(("spec", "router", field), "must be more than 0 seconds")
        durations[field] = getattr(defaults, field) if value is None else value
    return RouterConfig(
        host=host, port=port,
        max_queue=int(raw.get("max_queue", defaults.max_queue)),
        queue_timeout=timeout or defaults.queue_timeout,
        max_body=body or defaults.max_body,
        api_key_file=raw.get("api_key_file"),
        api_keys_file=raw.get("api_keys_file"),
        cors_origins=tuple(raw.get("cors_origins") or ()),
        max_connections=int(raw.get("max_connections", defaults.max_connections)),
        **durations,
    )
