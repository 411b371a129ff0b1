"""The JSON Schemas: valid 2020-12, consistent with each other and with the runtime table,
shipped inside the package."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import jsonschema
import pytest

from reconciler.manifests import schemata
from reconciler.runtimes import SPECS

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("kind", schemata.KINDS)
def test_schema_is_valid_2020_12(kind: str) -> None:
    """Each schema is itself a valid Draft 2020-12 schema."""
    schema = schemata.schema(kind)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_package_sees_the_top_level_schemas() -> None:
    """importlib.resources finds the same files as the top-level schemas/ directory."""
    pkg = importlib.resources.files("reconciler.manifests") / "schemas"
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


# ---------------------------------------------------------------- the schemas agree with the runtime table

RUNTIMES = list(SPECS.values())


def _role(runtime: str, **spec: object) -> dict:
    body = {"runtime": runtime, "mode": "adopted", **spec}
    return {"apiVersion": "reconciler/v1", "kind": "InferenceSpec",
            "metadata": {"name": "r"}, "spec": body}


def _valid(kind: str, document: dict) -> bool:
    return jsonschema.Draft202012Validator(schemata.schema(kind)).is_valid(document)


def test_runtime_enum_is_the_table() -> None:
    """The InferenceSpec runtime enum lists exactly the registry's runtimes, in its order."""
    enum = schemata.schema("InferenceSpec")["properties"]["spec"]["properties"]["runtime"]["enum"]
    assert enum == [str(rt.runtime) for rt in RUNTIMES]


@pytest.mark.parametrize("rt", RUNTIMES, ids=str)
def test_schema_rules_follow_each_declaration(rt) -> None:  # type: ignore[no-untyped-def]
    """Port required unless a default, draft_model and keep_alive only where declared."""
    port = {"serve": {"port": 8080}}
    assert _valid("InferenceSpec", _role(str(rt.runtime), **port))
    assert _valid("InferenceSpec", _role(str(rt.runtime))) == (rt.default_port is not None)
    draft = {"serve": {"port": 8080, "draft_model": "d"}}
    assert _valid("InferenceSpec", _role(str(rt.runtime), **draft)) == (
        "draft_model" in rt.serve_options)
    keep = {**port, "keep_alive": "5m"}
    assert _valid("InferenceSpec", _role(str(rt.runtime), **keep)) == rt.loads_models


@pytest.mark.parametrize("rt", RUNTIMES, ids=str)
def test_serve_programs_only_for_launched_runtimes(rt) -> None:  # type: ignore[no-untyped-def]
    """NodeConfig takes a serve program for exactly the runtimes the reconciler launches."""
    node = {"apiVersion": "reconciler/v1", "kind": "NodeConfig", "metadata": {"name": "n"},
            "spec": {"serve_programs": {str(rt.runtime): "/opt/server"}}}
    assert _valid("NodeConfig", node) == rt.launched


_CONTROL = [chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))]


@pytest.mark.parametrize("char", _CONTROL, ids=[f"U+{ord(c):04X}" for c in _CONTROL])
def test_free_text_refuses_c0_and_c1_control_characters(char: str) -> None:
    """Rule: text the reconciler prints refuses C1 control characters (U+0080-U+009F) as it
    does C0 and DEL: a CSI (U+009B) in restarted_at would reach an operator's terminal in a
    plan's details. restarted_at and every absolute path are checked alike."""
    role = _role("llamacpp", model="m", serve={"port": 8090}, restarted_at="2026-12-01T07:00Z")
    assert _valid("InferenceSpec", role)
    role["spec"]["restarted_at"] = f"2026{char}2J"
    assert not _valid("InferenceSpec", role)
    model = {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": "m"},
             "spec": {"format": "gguf", "root": f"/srv/{char}m",
                      "shards": [{"path": "m.gguf", "size": 1, "sha256": "a" * 64}]}}
    assert not _valid("Model", model)
    model["spec"]["root"] = "/srv/m"
    assert _valid("Model", model)  # the same document without the character is fine
    node = {"apiVersion": "reconciler/v1", "kind": "NodeConfig", "metadata": {"name": "n"},
            "spec": {"version_probe": {"llamacpp": ["/opt/llama-server", "--version"]}}}
    assert _valid("NodeConfig", node)
    node["spec"]["version_probe"]["llamacpp"][1] = f"--ver{char}sion"
    assert not _valid("NodeConfig", node)


@pytest.mark.parametrize("text", ["2026-12-01T07:00Z", "a\u00a0b", "réglé", "a b"])
def test_free_text_keeps_printable_characters(text: str) -> None:
    """Printable text, non-ASCII included (U+00A0 is the first character after C1), is fine."""
    assert _valid("InferenceSpec", _role("llamacpp", model="m", serve={"port": 8090},
                                         restarted_at=text))
