"""The JSON Schemas: valid 2020-12, consistent with each other, shipped inside the package."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import jsonschema
import pytest

from reconciler import schemata

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("kind", schemata.KINDS)
def test_schema_is_valid_2020_12(kind: str) -> None:
    """Each schema is itself a valid Draft 2020-12 schema."""
    schema = schemata.schema(kind)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_package_sees_the_top_level_schemas() -> None:
    """importlib.resources finds the same files as the top-level schemas/ directory."""
    pkg = importlib.resources.files("reconciler") / "schemas"
    for stem in schemata.SCHEMA_FILES.values():
        top = json.loads((ROOT / "schemas" / f"{stem}.schema.json").read_text())
        assert json.loads((pkg / f"{stem}.schema.json").read_text()) == top


def test_shared_definitions_agree() -> None:
    """A $defs entry present in several schemas is identical in all of them."""
    seen: dict[str, tuple[str, object]] = {}
    for kind in schemata.KINDS:
        for name, definition in schemata.schema(kind)["$defs"].items():
            if name in seen:
                assert definition == seen[name][1], f"$defs/{name}: {kind} vs {seen[name][0]}"
            seen[name] = (kind, definition)


@pytest.mark.parametrize("kind", schemata.KINDS)
def test_unknown_keys_rejected_everywhere(kind: str) -> None:
    """Every object in every schema sets additionalProperties (false or a value schema)."""
    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert "additionalProperties" in node, where
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")
    walk(schemata.schema(kind), kind)
