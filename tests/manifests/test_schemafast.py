"""schemafast's compiled check accepts exactly the documents jsonschema accepts (schemacheck).

The fast check decides whether ``jsonschema`` runs at all, so a document it
wrongly accepted would load with a problem unreported. Pinned three ways:
every document of the examples and of the invalid corpus, Hypothesis
mutations of valid documents (a value replaced, a key dropped or added), and
hand-picked edge cases of JSON Schema's semantics (``1.0`` is an integer,
``true`` is neither ``1`` nor a number, ``$`` is the end of the text).
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from reconciler.manifests import schemacheck, schemafast, schemata, yamlsafe

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_fleet  # noqa: E402  (the fleet the speed goal is measured on)


def full_valid(kind: str, value: Any) -> bool:
    return next(iter(schemacheck._validator(kind).iter_errors(value)), None) is None


def fast(kind: str) -> schemafast.Check:
    check = schemacheck._fast(kind)
    assert check is not None, f"{kind}'s schema no longer compiles: schemacheck always runs jsonschema"
    return check


def _documents(paths: list[Path]) -> list[tuple[str, Any]]:
    out = []
    for path in paths:
        docs, _ = yamlsafe.parse(path.name, path.read_bytes())
        out += [(d.value["kind"], d.value) for d in docs
                if isinstance(d.value, dict) and d.value.get("kind") in schemata.KINDS]
    return out


def _bench_documents(tmp: Path) -> list[tuple[str, Any]]:
    bench_fleet.write_fleet(tmp, 3, devices=True)
    return _documents(sorted(tmp.glob("*.yaml")))


CORPUS = _documents(sorted((HERE / "invalid").glob("*.yaml"))
                    + sorted((ROOT / "manifests" / "examples").rglob("*.yaml")))


@pytest.mark.parametrize("kind", schemata.KINDS)
def test_every_schema_compiles(kind: str) -> None:
    """A keyword schemafast does not mirror would silently turn the fast path off."""
    assert callable(fast(kind))


def test_corpus_decided_alike() -> None:
    """Each document of the examples and the invalid corpus: the same verdict both ways."""
    assert len(CORPUS) > 50
    verdicts = [(fast(kind)(value), full_valid(kind, value)) for kind, value in CORPUS]
    assert [f for f, _ in verdicts] == [s for _, s in verdicts]
    assert {s for _, s in verdicts} == {True, False}  # the corpus holds both


def test_bench_documents_pass(tmp_path: Path) -> None:
    """The benchmark's documents are valid, and the fast check says so (its point)."""
    docs = _bench_documents(tmp_path / "fleet")
    assert {k for k, _ in docs} == set(schemata.KINDS)
    assert all(fast(kind)(value) and full_valid(kind, value) for kind, value in docs)


VALID = [(k, v) for k, v in CORPUS if full_valid(k, v)]

STRINGS = st.sampled_from(["", "a", "a\n", " a", "m0", "llamacpp", "ollama", "managed", "cuda:0",
                           "cuda:1000", "/srv/m", "/srv/../m", "srv/m", "1GB", "1.5 GiB", "30s",
                           "-1s", "http://127.0.0.1:8080", "https://x\x1cy", "a" * 300, "é",
                           "reconciler/v1", "Model", "In", "Gt", "8", "0" * 64, "x\u0000"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 70_000), STRINGS,
                    st.sampled_from([0.0, 1.0, 1.5, -1.0, 8000.0, math.inf, math.nan, 2 ** 70]))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(STRINGS, SCALARS, max_size=3))


def _paths(value: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, here + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, here + (i,))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    kind, value = draw(st.sampled_from(VALID))
    value = copy.deepcopy(value)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(value)))
        if not path:
            continue
        parent = value
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "drop", "add", "repeat"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(STRINGS)] = draw(VALUES)
        elif action == "repeat" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
    return kind, value


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_mutations_decided_alike(case: tuple[str, Any]) -> None:
    """A valid document, changed here and there: the fast check agrees with jsonschema."""
    kind, value = case
    assert fast(kind)(value) == full_valid(kind, value)


SCHEMA = {
    "$defs": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}},
    "type": "object",
    "properties": {
        "port": {"$ref": "#/$defs/port"},
        "n": {"type": "number", "exclusiveMinimum": 0},
        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4},
        "mode": {"enum": ["a", 1]},
        "texts": {"enum": ["x", "y"]},
        "flag": {"const": True},
        "ids": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
        "mixed": {"type": "array", "uniqueItems": True},
        "tag": {"type": "string", "minLength": 1},
        "some": {"type": "array", "minItems": 1},
        "one": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        "tagged": {"type": "object", "propertyNames": {"pattern": "^x"},
                   "additionalProperties": {"type": "boolean"}},
    },
    "additionalProperties": False,
    "if": {"properties": {"mode": {"const": "a"}}, "required": ["mode"]},
    "then": {"required": ["name"]},
    "not": {"required": ["forbidden"]},
}
CASES = [
    ({"port": 80}, True), ({"port": 80.0}, True), ({"port": 80.5}, False), ({"port": True}, False),
    ({"port": 0}, False), ({"port": 65536}, False), ({"n": 0}, False), ({"n": math.nan}, True),
    ({"n": False}, False), ({"name": "abc"}, True), ({"mode": "a"}, False), ({"name": "abc", "mode": "a"}, True),
    ({"name": "abc\n", "mode": "a"}, False), ({"name": "abcde", "mode": "a"}, False),
    ({"mode": 1}, True), ({"mode": True}, False), ({"mode": 1.0}, True), ({"flag": 1}, False),
    ({"flag": True}, True), ({"ids": ["a", "b"]}, True), ({"ids": ["a", "a"]}, False),
    ({"ids": ["a", 1]}, False), ({"ids": ["a", "b", "c", "d"]}, False),
    ({"mixed": [1, True]}, True), ({"mixed": [1, 1.0]}, False), ({"mixed": [[1], [True]]}, True),
    ({"mixed": [{"a": 1}, {"a": 1}]}, False), ({"mixed": [0, False, None, ""]}, True),
    ({"one": 1}, False), ({"one": 1.5}, True), ({"tagged": {"xa": True}}, True),
    ({"tagged": {"ya": True}}, False), ({"tagged": {"xa": 1}}, False),
    ({"forbidden": 1}, False), ({"other": 1}, False), ([], False), ({}, True),
    ({"texts": "x"}, True), ({"texts": "z"}, False), ({"texts": ["x"]}, False),
    ({"texts": {"x": 1}}, False), ({"texts": None}, False),
    ({"ids": ("a",)}, False),  # not a plain value: never accepted (jsonschema: not an array)
    # the floors (minLength, minItems): the manifests' blank names and empty lists
    ({"tag": ""}, False), ({"tag": "a"}, True), ({"some": []}, False), ({"some": [0]}, True),
]


@pytest.mark.parametrize(("value", "valid"), CASES, ids=repr)
def test_json_schema_semantics(value: Any, valid: bool) -> None:
    """Edge cases of the keywords, against jsonschema itself and the expected answer."""
    check = schemafast.compile_schema(SCHEMA, lambda p: schemacheck._compile(p).search)
    reference = schemacheck._validator_class()(SCHEMA)
    assert reference.is_valid(value) == valid
    assert check(value) == valid


@pytest.mark.parametrize("schema", [
    {"patternProperties": {"^x": {}}}, {"$ref": "other.json#/x"}, {"$ref": "#/$defs/none"},
    {"format": "uri"}, {"unevaluatedProperties": False}, {"type": "decimal"},
])
def test_what_it_does_not_mirror_is_refused(schema: dict) -> None:
    """An unknown keyword is refused at compile time, never ignored."""
    with pytest.raises(schemafast.Unsupported):
        schemafast.compile_schema(schema, lambda p: schemacheck._compile(p).search)


def test_recursive_reference() -> None:
    """The compiled schema check follows a recursive ``$ref`` as jsonschema does."""
    schema = {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
              "$ref": "#/$defs/t"}
    check = schemafast.compile_schema(schema, lambda p: schemacheck._compile(p).search)
    assert check([[], [[]]]) and not check([[], [1]])


def test_a_clean_set_never_imports_jsonschema(tmp_path: Path) -> None:
    """jsonschema is imported for the messages of a document the fast check refuses only."""
    import subprocess
    bench_fleet.write_fleet(tmp_path / "fleet", 3, devices=True)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "m.yaml").write_text("apiVersion: reconciler/v1\nkind: Model\nmetadata: {name: m}\n"
                                   "spec: {format: gguf, root: /srv, shardz: []}\n")
    probe = ("import sys; from pathlib import Path; from reconciler.manifests import loader\n"
             "files = [(str(p), p.read_bytes()) for p in sorted(Path(sys.argv[1]).glob('*.yaml'))]\n"
             "result = loader.load(files)\n"
             "print(result.ok, 'jsonschema' in sys.modules)")
    for folder, want in ((tmp_path / "fleet", "True False"), (broken, "False True")):
        done = subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True,
                              text=True, check=True, cwd=ROOT)
        assert done.stdout.split() == want.split(), done.stderr
