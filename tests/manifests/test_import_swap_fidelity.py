"""`reconcile import llama-swap` never silently changes what runs (§1.7, issue 31): which weight
file a role serves, and which models may run together."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

from reconciler.manifests import importdocs, translate
from reconciler.manifests.importdocs import RoleDraft
from reconciler.manifests.translate import ModelNeed, Weight


def _reconcile(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd,
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
