"""`reconcile import llama-swap` never silently changes what runs (§1.7, issue 31): which weight
file a role serves, and which models may run together."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import reconciler
from reconciler.manifests import importdocs, llamaswap, translate
from reconciler.manifests.importdocs import RoleDraft
from reconciler.manifests.translate import ModelNeed, Weight


#: The tree whose ``reconciler`` this test imports: the command runs the same code (a scratch
#: copy under tools/mutants.py, not whatever the environment has installed).
TREE = str(Path(reconciler.__file__).resolve().parents[1])


def _reconcile(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (TREE, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _docs(out: Path) -> list[dict]:
    return [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]


# ---------------------------------------------------------------- one file, one Model


def test_same_named_files_in_two_folders_are_two_models(tmp_path: Path) -> None:
    """§1.7: `/srv/a/mmproj-F16.gguf` and `/srv/b/mmproj-F16.gguf` (unsloth's layout) are two
    Models with names of their own, and each role's projector is its own file's digest — not
    the first role's projector served to both."""
    files = {}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        for stem in (f"model-{folder}", "mmproj-F16"):
            data = b"GGUF" + folder.encode() * 300 + stem.encode()
            (tmp_path / folder / f"{stem}.gguf").write_bytes(data)
            files[f"{folder}/{stem}"] = hashlib.sha256(data).hexdigest()
    config = tmp_path / "config.yaml"
    config.write_text(f"""
models:
  vision-a:
    cmd: llama-server --port ${{PORT}} -m {tmp_path}/a/model-a.gguf --mmproj {tmp_path}/a/mmproj-F16.gguf
  vision-b:
    cmd: llama-server --port ${{PORT}} -m {tmp_path}/b/model-b.gguf --mmproj {tmp_path}/b/mmproj-F16.gguf
""")
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    docs = _docs(out)
    models = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Model"}
    roles = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "InferenceSpec"}
    assert set(models) == {"model-a", "model-b", "a-mmproj-F16", "b-mmproj-F16"}
    for folder in ("a", "b"):
        projector = models[roles[f"vision-{folder}"]["serve"]["mmproj"]]
        assert projector["root"] == str(tmp_path / folder)
        assert projector["shards"][0]["sha256"] == files[f"{folder}/mmproj-F16"]


def test_a_model_not_here_is_finished_under_the_name_the_role_uses(tmp_path: Path) -> None:
    """§1.7: the `to finish:` step for a projector not on this machine names it as the role
    does (`--name b-mmproj-F16`), so that running the step makes the set valid."""
    gone = tmp_path / "gone"
    config = tmp_path / "config.yaml"
    config.write_text(f"""
models:
  a: {{cmd: llama-server -m {gone}/a/m.gguf --mmproj {gone}/a/mmproj-F16.gguf}}
  b: {{cmd: llama-server -m {gone}/a/m.gguf --mmproj {gone}/b/mmproj-F16.gguf}}
""")
    done = _reconcile("import", "llama-swap", str(config), "-o", str(tmp_path / "out"),
                      cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"reconcile models add {gone}/b/mmproj-F16.gguf --name b-mmproj-F16`" in done.stderr
    assert f"reconcile models add {gone}/a/m.gguf`" in done.stderr
    assert done.stderr.count("to finish: Model m:") == 1


def test_one_path_is_one_model_whichever_roles_name_it() -> None:
    """§1.7: one file named by two roles (and once as `./`-spelt) is one Model; files that
    share a stem are told apart by the fewest folders that differ, numbered only when no
    folder does (`~/x.gguf` beside `x.gguf`)."""
    def line(*argv: str) -> RoleDraft:
        return RoleDraft(name=argv[2].rsplit("/", 1)[-1].removesuffix(".gguf"),
                         translation=translate.translate(["llama-server", *argv]))

    roles = [line("-m", "/srv/q/base.gguf", "--mmproj", "/srv/unsloth/Q/GGUF/mmproj-F16.gguf"),
             line("-m", "/srv/q/./base.gguf", "--mmproj", "/srv/unsloth/G/GGUF/mmproj-F16.gguf"),
             line("-m", "/srv/q/other.gguf", "--mmproj", "/srv/unsloth/Q/GGUF/mmproj-F16.gguf")]
    written = importdocs.documents(roles, {}, programs={})
    specs = [d["spec"] for d in written.documents if d["kind"] == "InferenceSpec"]
    assert [s["model"] for s in specs] == ["base", "base", "other"]
    assert [s["serve"]["mmproj"] for s in specs] == ["Q-GGUF-mmproj-F16", "G-GGUF-mmproj-F16",
                                                     "Q-GGUF-mmproj-F16"]
    assert sorted({n for n, _ in written.missing}) == ["G-GGUF-mmproj-F16",
                                                       "Q-GGUF-mmproj-F16", "base", "other"]
    names = importdocs.model_names([ModelNeed(weight=Weight.MODEL, path="~/x.gguf"),
                                    ModelNeed(weight=Weight.MODEL, path="x.gguf"),
                                    ModelNeed(weight=Weight.LORA, path="x.gguf")])
    assert sorted(set(names.values())) == ["x", "x-2"]


# ---------------------------------------------------------------- what may run together


def test_groups_under_routing_router_settings_let_models_run_together(tmp_path: Path) -> None:
    """§1.7: current llama-swap keeps its groups under `routing.router.settings`; three models
    in one `swap: false` group (three GPUs) run together there, so no role excludes another
    and the import says all three whole — not one at a time."""
    lines = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF" + name.encode() * 100)
        lines.append(f"  {name}:\n    cmd: llama-server --port ${{PORT}} -m {tmp_path}/{name}.gguf")
    config = tmp_path / "config.yaml"
    config.write_text("models:\n" + "\n".join(lines) + """
routing:
  router:
    settings:
      groups:
        gpus: {swap: false, exclusive: true, members: [a, b, c]}
""")
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    roles = [d["spec"] for d in _docs(out) if d["kind"] == "InferenceSpec"]
    assert len(roles) == 3 and not any("excludes" in r for r in roles)
    assert "3 of 3 command lines carried over whole" in done.stderr
    assert "not carried: routing" not in done.stderr


def _read(text: str) -> dict[str, llamaswap.SwapModel]:
    return {m.model_id: m for m in llamaswap.read(yaml.safe_load(text)).models}


_FOUR = "models: {a: {cmd: llama-server -m a.gguf}, b: {cmd: llama-server -m b.gguf}, " \
        "c: {cmd: llama-server -m c.gguf}, e: {cmd: llama-server -m e.gguf}}\n"


def test_the_matrix_becomes_excludes_of_the_pairs_no_combination_holds() -> None:
    """§1.7: `use: matrix`: `(a | b) & emb` lets a or b run beside the embedder (a var), never
    a beside b; `c`, alone in its set, runs alone. Pairs say all of it: nothing noted."""
    models = _read(_FOUR + """
routing:
  router:
    use: matrix
    settings:
      groups: {all: {swap: false, members: [a, b, c, e]}}
      matrix:
        vars: {emb: e}
        sets: {chat: "(a | b) & emb", big: "c"}
""")
    assert {m: s.excludes for m, s in models.items()} == {
        "a": ("role:b", "role:c"), "b": ("role:a", "role:c"),
        "c": ("role:a", "role:b", "role:e"), "e": ("role:c",)}
    assert not [n for s in models.values() for n in s.notes]


def test_a_matrix_combination_pairs_cannot_say_is_said_on_each_model() -> None:
    """§1.7: sets `a & b`, `b & c`, `+ab | a & c` let every two of a, b, c run together but
    never all three; excludes (pairs) would let all three run, so each of them carries a
    note that is not kept (never counted whole)."""
    models = _read(_FOUR + """
matrix:
  sets: {ab: "a & b", bc: "b & c", ac: "+ab | a & c", e: e}
""")
    assert models["a"].excludes == ("role:e",) and models["e"].excludes == (
        "role:a", "role:b", "role:c")
    for name in ("a", "b", "c"):
        (note,) = models[name].notes
        assert not note.kept and note.flag == "matrix" and "never all 3 together" in note.what
    assert not models["e"].notes


def test_a_group_that_stops_another_one_way_only_is_said() -> None:
    """§1.7: llama-swap starts `e` (a group that is not exclusive) beside a running `a` but
    stops `e` when `a` starts; excludes hold both ways, so both carry a note not kept."""
    models = _read(_FOUR + """
groups:
  main: {members: [a, b, c]}
  side: {exclusive: false, members: [e]}
""")
    assert models["e"].excludes == ("role:a", "role:b", "role:c")
    assert [n.flag for n in models["a"].notes] == ["groups"] and not models["a"].notes[0].kept
    assert "beside a, b, c in one start order only" in models["e"].notes[0].what


def test_routing_llama_swap_refuses_is_refused() -> None:
    """§1.7: top-level groups beside `routing.router`, or `use: matrix` with no matrix, are
    refused with the reason (llama-swap will not start on them either): nothing is guessed."""
    both = _FOUR + "groups: {g: {members: [a]}}\n"
    with pytest.raises(ValueError, match="llama-swap refuses it too"):
        _read(both + "routing: {router: {use: group}}\n")
    with pytest.raises(ValueError, match="llama-swap refuses it too"):
        _read(both + "routing: {router: {settings: {groups: {h: {members: [b]}}}}}\n")
    with pytest.raises(ValueError, match="no matrix"):
        _read(_FOUR + "routing: {router: {use: matrix}}\n")
