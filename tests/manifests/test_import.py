"""`reconcile import`: command lines and llama-swap configs → manifests (§1.7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.core.desired import Runtime
from reconciler.manifests import llamaswap, translate
from reconciler.manifests.translate import Weight

CORPUS = Path(__file__).parent / "corpus"
SWAP_CONFIGS = sorted((CORPUS / "llama-swap").glob("*.yaml"))
TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))


def _reconcile(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- translate (pure)


def test_every_field_flag_lands_in_its_field():
    """-m, -md, --mmproj, --lora, -c, -ctk/-ctv, --port, --alias go to their fields, not extra_args."""
    tr = translate.translate([
        "llama-server", "-m", "/m/a.gguf", "-md", "/m/d.gguf", "--mmproj", "/m/p.gguf",
        "--lora", "/m/l1.gguf,/m/l2.gguf", "-c", "8192", "-ctk", "q8_0", "-ctv", "q4_0",
        "--port", "9001", "--alias", "Qwen/Qwen3-8B,qwen", "-ngl", "99"])
    assert tr.runtime is Runtime.LLAMACPP and tr.expressed, tr.lost
    assert [m.weight for m in tr.models] == [Weight.MODEL, Weight.DRAFT, Weight.MMPROJ,
                                             Weight.LORA, Weight.LORA]
    assert tr.serve == {"ctx": 8192, "cache_type_k": "q8_0", "cache_type_v": "q4_0",
                        "port": 9001, "extra_args": ["-ngl", "99"]}
    assert tr.aliases == ("Qwen/Qwen3-8B", "qwen")


def test_values_are_single_argv_elements_whatever_they_hold():
    """A regex, a comma list and JSON pass as one element each, never through a shell."""
    tr = translate.translate([
        "llama-server", "-m", "m.gguf", "-ot", r"blk\..*_exps\.=CPU", "-ts", "1,0,0",
        "--chat-template-kwargs", '{"enable_thinking":false}'])
    assert tr.expressed, tr.lost
    assert tr.serve["extra_args"] == ["-ot", r"blk\..*_exps\.=CPU", "-ts", "1,0,0",
                                      "--chat-template-kwargs", '{"enable_thinking":false}']


def test_a_flag_equals_value_is_split_as_the_server_would():
    """--ctx-size=4096 is -c 4096."""
    tr = translate.translate(["llama-server", "--model=m.gguf", "--ctx-size=4096"])
    assert tr.serve["ctx"] == 4096 and tr.models[0].path == "m.gguf"


def test_what_cannot_be_carried_is_said_with_a_reason():
    """--rpc reaches the network, --bogus is no flag, a bare word is no argument: each a note."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "--rpc", "10.0.0.2:50052",
                              "--bogus", "stray"])
    assert not tr.expressed
    lost = {n.flag: n.what for n in tr.lost}
    assert set(lost) == {"--rpc", "--bogus", "stray"}
    assert "not a flag of llama-server" in lost["--bogus"]
    assert all(lost.values())


def test_host_beyond_loopback_is_dropped_with_its_reason():
    """--host 0.0.0.0 is not carried (servers bind loopback, §5), and says so; the line still is."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "--host", "0.0.0.0"])
    assert tr.expressed
    (note,) = [n for n in tr.notes if n.flag == "--host"]
    assert "loopback" in note.what and "extra_args" not in tr.serve


def test_an_api_key_becomes_a_key_file_never_a_value_in_git():
    """--api-key SECRET: the spec names a key file; the secret is nowhere in the translation."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "--api-key", "sk-secret"])
    assert tr.api_key and tr.expressed
    assert "sk-secret" not in repr(tr)


def test_a_flag_without_its_value_is_refused_with_why():
    """`-ngl` at the end, or followed by another flag: its value is missing; nothing is eaten."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "-t", "--temp", "0.6", "-ngl"])
    assert [n.flag for n in tr.lost] == ["-t", "-ngl"]
    assert all("needs a value" in n.what for n in tr.lost)
    assert tr.serve["extra_args"] == ["--temp", "0.6"]


def test_a_value_may_start_with_a_dash_only_when_it_is_a_number():
    """§1.7 a value may start with `-` only when it is a number: `--seed -1` keeps its value,
    while `-t -ngl 99` is `-t` without its value, then `-ngl 99` (nothing eaten)."""
    numbers = translate.translate(["llama-server", "-m", "m.gguf", "--seed", "-1", "-ngl", "-1",
                                   "--temp", "-.5"])
    assert numbers.expressed, numbers.lost
    assert numbers.serve["extra_args"] == ["--seed", "-1", "-ngl", "-1", "--temp", "-.5"]
    flag = translate.translate(["llama-server", "-m", "m.gguf", "-t", "-ngl", "99"])
    assert [n.flag for n in flag.lost] == ["-t"] and "needs a value" in flag.lost[0].what
    assert flag.serve["extra_args"] == ["-ngl", "99"]


def test_a_scaled_lora_keeps_its_scale():
    """§1.7 `--lora-scaled A:0.5` keeps its scale, into the written spec.serve.loras; a plain
    `--lora` is scale 1."""
    from reconciler.manifests import importdocs

    tr = translate.translate(["llama-server", "-m", "/m/q.gguf", "--lora-scaled",
                              "/m/a.gguf:0.5,/m/b.gguf:2", "--lora", "/m/c.gguf"])
    assert tr.expressed, tr.lost
    assert [(m.path, m.scale) for m in tr.models if m.weight is Weight.LORA] == [
        ("/m/a.gguf", 0.5), ("/m/b.gguf", 2.0), ("/m/c.gguf", None)]
    written = importdocs.documents([importdocs.RoleDraft(name="chat", translation=tr)], {},
                                   programs={})
    (role,) = [d for d in written.documents if d["kind"] == "InferenceSpec"]
    assert role["spec"]["serve"]["loras"] == [{"model": "a", "scale": 0.5},
                                              {"model": "b", "scale": 2.0},
                                              {"model": "c", "scale": 1.0}]


def test_a_given_port_fills_only_a_missing_port():
    """§1.7 llama-swap's `${PORT}` (the `port` given beside the line) fills a *missing*
    `--port` only: a line's own `--port 9001` stays."""
    own = translate.translate(["llama-server", "-m", "m.gguf", "--port", "9001"], port=5800)
    assert own.serve["port"] == 9001
    missing = translate.translate(["llama-server", "-m", "m.gguf"], port=5800)
    assert missing.serve["port"] == 5800


def test_only_mlx_lms_model_org_repo_is_a_hub_repository():
    """§1.7 only mlx_lm.server's `--model ORG/REPO` is a Hub repository (it downloads one);
    llama-server's `-m models/q` is a path, as is mlx-lm's `--model /m/q`."""
    llama = translate.translate(["llama-server", "-m", "models/q"])
    assert [(m.path, m.hf_repo) for m in llama.models] == [("models/q", None)]
    mlx = translate.translate(["mlx_lm.server", "--model", "org/repo"])
    assert [(m.path, m.hf_repo) for m in mlx.models] == [(None, "org/repo")]
    local = translate.translate(["mlx_lm.server", "--model", "/m/q"])
    assert [(m.path, m.hf_repo) for m in local.models] == [("/m/q", None)]


def test_env_prefix_wrappers_and_python_m():
    """ENV=V and numactl before the program; `python -m mlx_lm.server`; a Hub id is a Hub model."""
    tr = translate.translate(["CUDA_VISIBLE_DEVICES=0,1", "numactl", "--interleave=all",
                              "/opt/llama-server", "-m", "m.gguf"])
    assert tr.env == (("CUDA_VISIBLE_DEVICES", "0,1"),) and tr.program == "/opt/llama-server"
    mlx = translate.translate(["python", "-m", "mlx_lm.server", "--model",
                               "mlx-community/Qwen3-4B-4bit", "--port", "8081"])
    assert mlx.runtime is Runtime.MLX_LM and mlx.models[0].hf_repo == "mlx-community/Qwen3-4B-4bit"
    with pytest.raises(ValueError, match="not a server"):
        translate.translate(["docker", "run", "x"])


# ---------------------------------------------------------------- llama-swap (pure)


def test_swap_macros_ports_ttl_and_one_at_a_time():
    """Macros expand (model level first), ${PORT} counts from startPort, ttl → idle_after,
    and without groups every model excludes every other (llama-swap runs one at a time)."""
    config = yaml.safe_load("""
        startPort: 9100
        macros: {srv: "llama-server --port ${PORT}", ctx: "4096"}
        models:
          "Qwen/Qwen3-8B":
            macros: {ctx: "8192"}
            cmd: |
              ${srv}
              # a comment line llama-swap drops
              -m /m/q.gguf -c ${ctx}
            ttl: 300
            aliases: [gpt-4o-mini]
          small:
            cmd: ${srv} -m /m/s.gguf -c ${ctx}
    """)
    swap = llamaswap.read(config)
    a, b = swap.models
    assert a.argv == ("llama-server", "--port", "9100", "-m", "/m/q.gguf", "-c", "8192")
    assert b.argv[2] == "9101" and b.argv[-1] == "4096"
    assert (a.idle_after, b.idle_after) == ("300s", llamaswap.NEVER_IDLE)
    assert a.role == "Qwen-Qwen3-8B" and a.aliases == ("Qwen/Qwen3-8B", "gpt-4o-mini")
    assert a.excludes == ("role:small",) and b.excludes == ("role:Qwen-Qwen3-8B",)


def test_swap_groups_become_excludes():
    """swap: false lets members run together; exclusive: true excludes other groups but
    never a persistent one."""
    config = yaml.safe_load("""
        models: {a: {cmd: llama-server -m a.gguf}, b: {cmd: llama-server -m b.gguf},
                 c: {cmd: llama-server -m c.gguf}, d: {cmd: llama-server -m d.gguf}}
        groups:
          pair: {swap: false, exclusive: true, members: [a, b]}
          solo: {swap: true, exclusive: false, members: [c]}
          keep: {persistent: true, exclusive: false, members: [d]}
    """)
    ex = {m.model_id: m.excludes for m in llamaswap.read(config).models}
    assert ex["a"] == ("role:c",) and ex["b"] == ("role:c",)
    assert ex["c"] == ("role:a", "role:b") and ex["d"] == ()


@pytest.mark.parametrize("host, kept", [("127.0.0.1", True), ("127.0.0.2", True), ("[::1]", True),
                                        ("localhost", True), ("10.0.0.5", False),
                                        ("0.0.0.0", False), ("notlocalhost", False)])
def test_swap_proxy_is_loopback_by_the_one_rule(host, kept):
    """§5: a model's ``proxy`` host is judged by core/loopback (all of 127/8, ``::1``, the
    name ``localhost``), not by a list of its own; a host beyond it is noted as dropped."""
    config = yaml.safe_load(f"""
        models: {{m: {{cmd: "llama-server --port 9000 -m m.gguf", proxy: "http://{host}:9000"}}}}
    """)
    (model,) = llamaswap.read(config).models
    dropped = [n for n in model.notes if n.flag == "proxy"]
    assert (not dropped) is kept, dropped


@pytest.mark.parametrize("path", SWAP_CONFIGS, ids=lambda p: p.stem)
def test_real_swap_configs_read_whole(path):
    """Each real config (kept with its source) is read: every model, notes with reasons."""
    assert path.read_text().startswith("# source:")
    config = yaml.safe_load(path.read_text())
    if "models" not in config:  # a docker-compose file carrying the config as a `configs` entry
        (config,) = [yaml.safe_load(c["content"]) for c in config["configs"].values()]
    swap = llamaswap.read(config)
    assert len(swap.models) == len(config["models"])
    assert all(n.what for m in swap.models for n in m.notes)


# ---------------------------------------------------------------- the command (shell)


def test_import_cmd_hashes_a_real_model_and_validates(tmp_path):
    """`reconcile import cmd` on a real GGUF: a Model document with its digest, a role, a node;
    the result validates (exit 0), and a second import into the same place writes nothing."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1020))
    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}\n")
    out = tmp_path / "out"
    argv = ["import", "cmd", "-o", str(out), "--", "llama-server", "-m", str(gguf),
            "--port", "8090", "--chat-template-file", str(template), "--host", "0.0.0.0"]
    done = _reconcile(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    models = yaml.safe_load((out / "models.yaml").read_text())
    import hashlib
    assert models["spec"]["shards"][0]["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    role = yaml.safe_load((out / "tiny.yaml").read_text())
    assert role["spec"]["serve"]["extra_args"] == ["--chat-template-file", "chat.jinja"]
    assert (out / "chat.jinja").read_text() == "{{ messages }}\n"
    assert "tiny: dropped: --host: '0.0.0.0' not carried: the reconciler binds loopback" in done.stderr
    again = _reconcile(*argv, cwd=tmp_path)
    assert again.returncode == 1 and "exists" in again.stderr


def test_import_swap_example_config_writes_and_says_what_is_left(tmp_path):
    """llama-swap's own example config: written; models not on this machine are `to finish:`
    steps, llama-swap-only keys are `not carried:` lines; exit 1 until the models exist."""
    src = CORPUS / "llama-swap" / "mostlygeek-config.example.yaml"
    done = _reconcile("import", "llama-swap", str(src), "-o", str(tmp_path / "out"),
                      cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "to finish: Model" in done.stderr and "not carried: filters" in done.stderr
    node = yaml.safe_load((tmp_path / "out" / "node.yaml").read_text())
    assert node["spec"]["router"] == {"listen": "127.0.0.1:8080"}


def test_older_spellings_are_written_as_this_server_says_them():
    """--no-mmap --mlock, a bare -fa, --draft-max and -cd, as written for older releases,
    become --load-mode mlock, -fa on, --spec-draft-n-max; -cd is dropped with its reason."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "-md", "d.gguf", "--no-mmap",
                              "--mlock", "-fa", "--draft-max", "16", "-cd", "4096", "-c", "0"])
    assert tr.expressed, tr.lost
    assert tr.serve["extra_args"] == ["-fa", "on", "--spec-draft-n-max", "16",
                                      "--load-mode", "mlock"]
    assert "ctx" not in tr.serve
    said = [str(n) for n in tr.notes]
    assert "--mlock --no-mmap: an older spelling: written as `--load-mode mlock` for this " \
           "llama-server" in said
    assert any(s.startswith("-fa: an older spelling: written as `-fa on`") for s in said)
    assert any(s.startswith("-cd: the draft model's context") for s in said)


def test_a_config_with_nothing_importable_writes_nothing(tmp_path):
    """Every model's cmd an undefined macro (as posted in llama-swap #571): exit 1, no file."""
    src = CORPUS / "llama-swap" / "issue571-groups.yaml"
    done = _reconcile("import", "llama-swap", str(src), "-o", str(tmp_path / "out"),
                      cwd=tmp_path)
    assert done.returncode == 1 and "nothing written" in done.stderr
    assert not (tmp_path / "out").exists()
