"""The JSON Schemas of the manifest kinds, loaded from package data (PURE).

``schemas/*.schema.json`` (top level, for editors: ``# yaml-language-server:
$schema=…``) is reachable inside the package as ``reconciler/manifests/schemas`` (a
symlink), so an installed package finds them through ``importlib.resources``.
Reading package data is the only thing this module does; it is safe to import
from pure modules.
"""

from __future__ import annotations

import functools
import json
from typing import Any

#: kind → schema file stem.
SCHEMA_FILES: dict[str, str] = {
    "Model": "model",
    "InferenceSpec": "inferencespec",
    "NodeConfig": "nodeconfig",
    "Program": "program",
    "Rollout": "rollout",
}

KINDS: tuple[str, ...] = tuple(SCHEMA_FILES)


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The parsed schema of ``kind`` (``KeyError`` for an unknown kind)."""
    import importlib.resources  # only when a schema is read: a valid cached set needs none

    stem = SCHEMA_FILES[kind]
    resource = importlib.resources.files("reconciler.manifests") / "schemas" / f"{stem}.schema.json"
    return json.loads(resource.read_text(encoding="utf-8"))
