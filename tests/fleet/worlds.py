"""Manifest text for fleet tests: NodeConfigs, Models and roles as YAML documents."""

from __future__ import annotations

import json

SHA = "0" * 64


def node(name: str, *, labels: dict | None = None, ports=(8000, 8999), budget: str | None = None,
         extra: dict | None = None) -> dict:
    spec: dict = {"serve_programs": {"llamacpp": "/opt/llama-server"},
                  "run_as": {"uid": 1000, "gid": 1000}}
    if ports is not None:
        spec["allowed_ports"] = {"from": ports[0], "to": ports[1]}
    if budget is not None:
        spec["memory_budget"] = budget
    spec.update(extra or {})
    meta: dict = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "reconciler/v1", "kind": "NodeConfig", "metadata": meta, "spec": spec}


def model(name: str = "qwen", size: int = 1_000_000_000, root: str = "/srv/models") -> dict:
    return {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": name},
            "spec": {"format": "gguf", "root": root,
                     "shards": [{"path": f"{name}.gguf", "size": size, "sha256": SHA}]}}


def role(name: str, port: int, *, placement: dict | None = None, ctx: int | None = None,
         state: str | None = None, kv: str | None = None, model_name: str = "qwen") -> dict:
    spec: dict = {"runtime": "llamacpp", "mode": "managed", "model": model_name,
                  "serve": {"port": port}}
    if ctx is not None:
        spec["serve"]["ctx"] = ctx
    if placement is not None:
        spec["placement"] = placement
    if state is not None:
        spec["state"] = state
    if kv is not None:
        spec["memory"] = {"kv": kv}
    return {"apiVersion": "reconciler/v1", "kind": "InferenceSpec", "metadata": {"name": name},
            "spec": spec}


def files(*docs: dict, name: str = "fleet.yaml") -> list[tuple[str, bytes]]:
    """One file of documents (JSON is YAML), one document per line block."""
    return [(name, "\n---\n".join(json.dumps(d, indent=1) for d in docs).encode())]
