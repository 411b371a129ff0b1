"""Properties of the loader: nothing but reported problems on any input; valid sets round-trip."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from reconciler.manifests import loader
from reconciler.core.desired import Mode, Runtime
from reconciler.core.units import is_plain_token

EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples"
EXAMPLE_DOCS = [d for p in sorted(EXAMPLES.glob("*.yaml"))
                for d in yaml.safe_load_all(p.read_text())]


def _check_result(result: loader.LoadResult, files: list[tuple[str, bytes]]) -> None:
    """Invariants of every LoadResult."""
    assert (result.desired is None) == bool(result.problems)
    assert list(result.problems) == sorted(result.problems)
    names = {name for name, _ in files}
    for p in result.problems:
        assert p.file in names and p.path.startswith("$") and p.message
        data = dict(files)[p.file]
        breaks = sum(data.count(b) for b in (b"\n", b"\r", "\x85".encode(),
                                             "\u2028".encode(), "\u2029".encode()))
        assert 0 <= p.line <= breaks + 1


@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    """Any bytes give a result with problems or a desired state, never an exception."""
    files = [("x.yaml", data)]
    _check_result(loader.load(files), files)


@given(st.text(alphabet=st.sampled_from(list("ab:- \n\t[]{}&*!|>'\"#%@,?~01.")), max_size=200))
def test_yamlish_text_never_raises(text: str) -> None:
    """YAML-flavoured noise (anchors, tags, flow collections) never raises."""
    files = [("x.yaml", text.encode())]
    _check_result(loader.load(files), files)


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                  st.floats(allow_nan=True), st.text(max_size=20))
_values = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def _mutated_examples(draw: st.DrawFn) -> list[Any]:
    docs = copy.deepcopy(EXAMPLE_DOCS)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(docs) - 1))
        path = draw(st.sampled_from(_paths(docs[i])))
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            docs[i] = draw(_values) if op == "replace" else docs[i]
            continue
        parent = docs[i]
        for step in path[:-1]:
            parent = parent[step]
        if op == "replace":
            parent[path[-1]] = draw(_values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.text(max_size=8))] = draw(_values)
    return docs


@given(_mutated_examples())
def test_mutated_examples_never_raise(docs: list[Any]) -> None:
    """Replacing, deleting or adding values anywhere in valid documents never raises."""
    files = [("m.yaml", yaml.safe_dump_all(docs).encode())]
    _check_result(loader.load(files), files)


_names = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True).filter(is_plain_token)
_sha = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


@st.composite
def _valid_set(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(_names, min_size=2, max_size=5, unique=True))
    ports = draw(st.lists(st.integers(8000, 8999), min_size=len(names), max_size=len(names),
                          unique=True))
    model = {"apiVersion": "reconciler/v1", "kind": "Model", "metadata": {"name": "m"},
             "spec": {"format": "gguf", "root": "/srv/m", "shards": [
                 {"path": f"s{i}.gguf", "size": draw(st.integers(0, 2**40)), "sha256": draw(_sha)}
                 for i in range(draw(st.integers(1, 3)))]}}
    node_restart = draw(st.fixed_dictionaries({}, optional={
        "max_restarts": st.integers(0, 20), "base": st.integers(0, 100), "cap": st.sampled_from(
            ["30s", "1m", "1h30m", "250ms"])}))
    node = {"apiVersion": "reconciler/v1", "kind": "NodeConfig", "metadata": {"name": "n"},
            "spec": {"allowed_ports": {"from": 8000, "to": 8999}, "restart": node_restart,
                     "serve_programs": {"llamacpp": "/usr/local/bin/llama-server"},
                     "memory_budget": draw(st.integers(0, 2**42))}}
    roles = []
    for name, port in zip(names, ports):
        spec: dict[str, Any] = {"runtime": "llamacpp", "mode": draw(st.sampled_from(
            ["managed", "adopted"])), "model": "m", "serve": {"port": port}}
        if draw(st.booleans()):
            spec["serve"]["ctx"] = draw(st.integers(1, 1 << 20))
        if draw(st.booleans()):
            spec["memory"] = {"kv": draw(st.sampled_from(["1GB", "512MiB", 7, "0.5GiB"]))}
        if draw(st.booleans()):
            spec["excludes"] = [f"role:{n}" for n in names if n != name][:2]
        if draw(st.booleans()):
            spec["restart"] = {"max_restarts": draw(st.integers(0, 9))}
        roles.append({"apiVersion": "reconciler/v1", "kind": "InferenceSpec",
                      "metadata": {"name": name}, "spec": spec})
    return {"model": model, "node": node, "roles": roles}


@given(_valid_set(), st.booleans())
def test_valid_sets_round_trip(docs: dict[str, Any], split: bool) -> None:
    """Generated valid documents load without problems into exactly what they say."""
    all_docs = [docs["model"], docs["node"], *docs["roles"]]
    if split:
        files = [(f"{i}.yaml", yaml.safe_dump(d).encode()) for i, d in enumerate(all_docs)]
    else:
        files = [("all.yaml", yaml.safe_dump_all(all_docs).encode())]
    result = loader.load(files)
    assert result.problems == ()
    desired = result.desired
    assert desired is not None
    shards = docs["model"]["spec"]["shards"]
    assert desired.model("m").weights_size == sum(s["size"] for s in shards)
    node_restart = docs["node"]["spec"]["restart"]
    assert desired.node.restart.max_restarts == node_restart.get("max_restarts", 5)
    for raw in docs["roles"]:
        role = desired.role(raw["metadata"]["name"])
        spec = raw["spec"]
        assert role.runtime is Runtime.LLAMACPP and role.mode is Mode(spec["mode"])
        assert role.serve.port == spec["serve"]["port"]
        assert role.serve.ctx == spec["serve"].get("ctx")
        assert role.memory.weights == desired.model("m").weights_size
        assert role.excludes == {e.removeprefix("role:") for e in spec.get("excludes", [])}
        assert role.restart.max_restarts == spec.get("restart", {}).get(
            "max_restarts", node_restart.get("max_restarts", 5))
        assert role.restart.base == desired.node.restart.base
        assert role.ref is not None
    assert result.counts == {"Model": 1, "NodeConfig": 1, "InferenceSpec": len(docs["roles"])}
