"""`reconcile import llama-swap` reads a config as llama-swap reads it, and never counts a line
whole that is not (§1.7, issue 31): Windows commands split the Windows way, YAML read as
yaml.v3 reads it, values the flag table refuses not carried, one shared port made distinct."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

import reconciler
from reconciler.manifests import llamaswap, translate

#: The tree whose ``reconciler`` this test imports (the command runs the same code).
TREE = str(Path(reconciler.__file__).resolve().parents[1])


def _reconcile(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (TREE, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _roles(out: Path) -> dict[str, dict]:
    docs = [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "InferenceSpec"}


def _models(text: str) -> dict[str, llamaswap.SwapModel]:
    return {m.model_id: m for m in llamaswap.read(llamaswap.parse(text)).models}


# ---------------------------------------------------------------- Windows configs


_WINDOWS = r"""
models:
  qwen:
    cmd: |
      C:\llama\llama-server.exe --port ${PORT}
      -m "C:\Users\Me\models\Qwen3 8B\qwen3-8b-q4_k_m.gguf" -ngl 99 --alias "say \"hi\""
"""


def test_a_windows_command_keeps_its_backslashes() -> None:
    """§1.7: a config whose commands name a drive (llama-swap ran on Windows, where it splits
    a command the Windows way) keeps every backslash: `C:\\llama\\llama-server.exe` is the
    program, a quoted path with a space is one word, `\\"` is a quote."""
    (qwen,) = _models(_WINDOWS).values()
    assert qwen.argv == ("C:\\llama\\llama-server.exe", "--port", "5800", "-m",
                         "C:\\Users\\Me\\models\\Qwen3 8B\\qwen3-8b-q4_k_m.gguf",
                         "-ngl", "99", "--alias", 'say "hi"')
    (said,) = [n for n in qwen.notes if n.changed]
    assert said.kept and "a Windows program" in said.what and "not on this machine" in said.what
    assert llamaswap.split_cmd(r'a\b "c d" e\\"f g"', windows=True) == ["a\\b", "c d", 'e\\f g']
    assert llamaswap.split_cmd(r"a\ b 'c d'") == ["a b", "c d"]  # POSIX stays POSIX


def test_a_windows_config_is_imported_with_its_flags_and_model_said(tmp_path: Path) -> None:
    """§1.7: importing the Windows config writes the role (flags, port, model name carried),
    says the program is a Windows one not on this machine, and the step to finish the Model
    says to copy the file here — never `'C:llamallama-server' is not a server`."""
    config = tmp_path / "config.yaml"
    config.write_text(_WINDOWS)
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert "is not a server" not in done.stderr
    role = _roles(out)["qwen"]
    assert role["model"] == "qwen3-8b-q4_k_m"
    assert role["serve"]["extra_args"] == ["-ngl", "99"]
    assert "qwen: changed: C:\\llama\\llama-server.exe: a Windows program" in done.stderr
    assert "is a Windows path, not on this machine: copy the file here" in done.stderr
    assert "1 of 1 command lines carried over whole" in done.stderr


# ---------------------------------------------------------------- YAML as yaml.v3 reads it


def test_macros_keep_the_text_llama_swap_keeps() -> None:
    """§1.7: yaml.v3 reads `on`, `yes` and `1:30` as text (YAML 1.1 would say True and 90);
    `true` and `1.0` are written as Go's %v writes them (`true`, `1`)."""
    (m,) = _models("""
macros: {fa: on, mlock: yes, t: 1:30, b: true, temp: 1.0}
models:
  m: {cmd: "llama-server -m m.gguf -fa ${fa} --x ${mlock} ${t} ${b} --temp ${temp}"}
""").values()
    assert m.argv == ("llama-server", "-m", "m.gguf", "-fa", "on", "--x", "yes", "1:30",
                      "true", "--temp", "1")
    tr = translate.translate(m.argv[:5])
    assert tr.expressed and tr.serve["extra_args"] == ["-fa", "on"]


# ---------------------------------------------------------------- values the table refuses


def test_a_value_the_flag_table_refuses_is_not_carried() -> None:
    """§1.7: `--n-gpu-layers 100,100` and `-fa True` are refused by the flag table: neither is
    written, each is `not carried` in the table's own words, and the line is not whole."""
    tr = translate.translate(["llama-server", "-m", "m.gguf", "--n-gpu-layers", "100,100",
                              "-fa", "True", "--temp", "0.6"])
    assert tr.serve["extra_args"] == ["--temp", "0.6"]
    assert not tr.expressed
    assert [(n.flag, n.what) for n in tr.lost] == [
        ("--n-gpu-layers", "the value of --n-gpu-layers must be an integer or one of auto, "
                           "all, not '100,100'"),
        ("-fa", "the value of -fa must be one of on, off, auto, enabled, disabled, true, "
                "false, 1, 0, not 'True'")]


# ---------------------------------------------------------------- the one-port pattern


def test_models_sharing_one_fixed_port_get_distinct_ports_said(tmp_path: Path) -> None:
    """§1.7: every model on `--port 9999` (llama-swap runs one at a time) and one with no port
    (the server's 8080, the router's port): the first keeps 9999, the others get free ports,
    each said (`changed:`, the router hides ports from clients); the set is valid and whole."""
    lines = []
    for name, port in (("a", "--port 9999 "), ("b", "--port 9999 "), ("c", "")):
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF" + name.encode() * 100)
        lines.append(f"  {name}: {{cmd: llama-server {port}-m {tmp_path}/{name}.gguf}}")
    config = tmp_path / "config.yaml"
    config.write_text("models:\n" + "\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ports = {name: spec["serve"]["port"] for name, spec in _roles(out).items()}
    assert ports == {"a": 9999, "b": 10000, "c": 8081}
    assert "b: changed: --port: 9999 is role a's port too" in done.stderr
    assert "c: changed: --port: 8080 is the router's port" in done.stderr
    assert "the router forwards by model name" in done.stderr
    assert "3 of 3 command lines carried over whole" in done.stderr


# ---------------------------------------------------------------- an honest tally


def test_a_line_whose_output_does_not_validate_is_never_counted_whole(tmp_path: Path) -> None:
    """§1.7: `a` carries every flag, but the grammar file it names is not on this machine: its
    written file does not validate, so the tally counts only `b` and `c` whole — a Model that
    is not here yet (`c`, a `to finish:` step) does not cost its line. `b`'s `env` names a
    variable llama-server roles may not set: not written, `not carried:` in validation's
    words (the line is not whole, but its file is valid)."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF" + name.encode() * 100)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
models:
  a: {{cmd: "llama-server --port 9001 -m {tmp_path}/a.gguf --grammar-file {tmp_path}/g.gbnf"}}
  b: {{cmd: "llama-server --port 9002 -m {tmp_path}/b.gguf", env: ["NOT_ALLOWED_X=1"]}}
  c: {{cmd: "llama-server --port 9003 -m {tmp_path}/gone/c.gguf"}}
""")
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 1
    assert "a.yaml:" in done.stderr and "g.gbnf: no such file" in done.stderr
    assert "b: not carried: NOT_ALLOWED_X: NOT_ALLOWED_X is not a variable" in done.stderr
    assert "env" not in _roles(out)["b"] and "b.yaml:" not in done.stderr
    assert "1 of 3 command lines carried over whole" in done.stderr


# ---------------------------------------------------------------- the rest of llama-swap's schema


def test_concurrency_limit_use_model_name_and_keys_llama_swap_ignores() -> None:
    """§1.7: `concurrencyLimit: 4` is `max_concurrency: 4` (said: over it, requests wait);
    `useModelName` and `cmdStop` are done our own way and a key llama-swap does not read
    (`comment`) it ignored too: none of them costs the line; `filters.setParamsByID` names
    become aliases, the parameters said not carried."""
    (m,) = _models("""
models:
  gemma:
    cmd: llama-server -m g.gguf
    concurrencyLimit: 4
    useModelName: google/gemma
    cmdStop: kill ${PID}
    comment: my best model
    filters:
      setParamsByID:
        "gemma:thinking": {temperature: 1.0}
""").values()
    assert m.max_concurrency == 4
    assert m.aliases == ("gemma:thinking",)
    lost = [n.flag for n in m.notes if not n.kept]
    assert lost == ["setParamsByID.gemma:thinking"]
    said = {n.flag: n for n in m.notes if n.kept}
    assert said["concurrencyLimit"].changed and "max_concurrency: 4" in said["concurrencyLimit"].what
    assert said["useModelName"].dropped and said["cmdStop"].dropped
    assert said["comment"].what == "llama-swap does not read it either"


def test_port_macros_go_in_sorted_model_id_order() -> None:
    """§1.7: llama-swap hands out `${PORT}` in sorted model-id order, not the file's."""
    models = _models("models:\n  zeta: {cmd: 'llama-server --port ${PORT} -m z.gguf'}\n"
                     "  alpha: {cmd: 'llama-server --port ${PORT} -m a.gguf'}\n")
    assert (models["alpha"].port, models["zeta"].port) == (5800, 5801)


def test_env_macros_are_expanded_from_this_machines_environment() -> None:
    """§1.7: `${env.MODELS}` is expanded as llama-swap expands it (from the environment),
    said; one this machine lacks is left as written with a note that is not kept."""
    config = llamaswap.parse("models:\n  a: {cmd: 'llama-server -m ${env.MODELS}/a.gguf "
                             "--slot-save-path ${env.NOPE}'}\n")
    (a,) = llamaswap.read(config, environ={"MODELS": "/srv/models"}).models
    assert a.argv[:3] == ("llama-server", "-m", "/srv/models/a.gguf")
    notes = {n.flag: n for n in a.notes}
    assert notes["${env.MODELS}"].kept and notes["${env.MODELS}"].changed
    assert not notes["${env.NOPE}"].kept


def test_a_shell_script_cmd_carries_its_server_command_and_says_the_rest() -> None:
    """§1.7: `bash -c "cd /models && exec llama-server …"` is llama-server (not "'bash' is
    not a server"); the `cd` is said, not carried (it changes what relative paths name)."""
    (a,) = _models('models: {a: {cmd: "bash -c \\"cd /models && exec llama-server -m q.gguf\\""}}'
                   ).values()
    assert a.argv == ("exec", "llama-server", "-m", "q.gguf")
    (note,) = a.notes
    assert not note.kept and "`cd /models`" in note.what


def test_the_import_says_rewrites_other_builds_and_excludes_only_written_roles(
        tmp_path: Path) -> None:
    """§1.7: an older spelling rewritten is said (`changed:`); a model that ran another build
    of llama-server than the node's one program is `not carried:`; a model that could not be
    imported is named by no role's `excludes` (the set would not validate)."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF" + name.encode() * 100)
    for build in ("cuda", "vulkan"):
        (tmp_path / build).mkdir()
        (tmp_path / build / "llama-server").write_text("#!/bin/sh\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"""
models:
  a: {{cmd: "{tmp_path}/cuda/llama-server --port 9001 -m {tmp_path}/a.gguf --mlock --no-mmap"}}
  b: {{cmd: "{tmp_path}/vulkan/llama-server --port 9002 -m {tmp_path}/b.gguf"}}
  gone: {{cmd: "vllm serve x"}}
""")
    out = tmp_path / "out"
    done = _reconcile("import", "llama-swap", str(config), "-o", str(out), cwd=tmp_path)
    assert "gone: not imported" in done.stderr
    assert "a: changed: --mlock --no-mmap: an older spelling" in done.stderr
    assert f"b: not carried: {tmp_path}/vulkan/llama-server: another build" in done.stderr
    roles = _roles(out)
    assert roles["a"]["excludes"] == ["role:b"] and roles["b"]["excludes"] == ["role:a"]
    assert "1 of 2 command lines carried over whole" in done.stderr


# ---------------------------------------------------------------- the public corpus


CORPUS = Path(__file__).parent / "corpus" / "llama-swap"


def _corpus() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(CORPUS.glob("*.yaml")):
        config = llamaswap.parse(path.read_text())
        if "models" not in config:  # a docker-compose file carrying the config in `configs`
            (config,) = [llamaswap.parse(c["content"]) for c in config["configs"].values()]
        out.append((path, config))
    return out


def test_no_flag_of_a_public_config_changes_without_a_word() -> None:
    """§1.7: over every public llama-swap config of the corpus (each names its source), the
    import raises nothing but a reasoned refusal, and every flag of every imported line is
    accounted for by a note — carried, rewritten, dropped with why, or not carried: no flag
    is lost or changed silently."""
    silent = []
    for path, config in _corpus():
        for m in llamaswap.read(config, environ={}).models:
            try:
                tr = translate.translate(m.argv, port=m.port)
            except ValueError:
                continue  # "not imported: why", said by the command
            said = {word for n in tr.notes for word in n.flag.split()}
            _, words, _ = translate.program_of(m.argv)
            silent += [(path.name, m.model_id, w) for w in words[1:]
                       if w.startswith("-") and w.partition("=")[0] not in said
                       and not translate.flag_tables.is_number(w)]
    assert silent == []


def test_the_public_corpus_comes_over_whole_without_a_traceback(tmp_path: Path) -> None:
    """§1.7 (issue 31's goal): importing every public config of the corpus raises no
    traceback, and of the lines it could express (imported), at least 90 % are counted whole
    — a count that includes only lines whose written files validate (models not here aside)."""
    whole = expressed = 0
    for k, (path, config) in enumerate(_corpus()):
        src = tmp_path / f"{k}.yaml"
        src.write_text(yaml.safe_dump(config) if "models" not in llamaswap.parse(
            path.read_text()) else path.read_text())
        done = _reconcile("import", "llama-swap", str(src), "-o", str(tmp_path / f"out{k}"),
                          cwd=tmp_path)
        assert "Traceback" not in done.stderr, (path.name, done.stderr)
        tally = [line.split() for line in done.stderr.splitlines()
                 if line.endswith("command lines carried over whole")]
        if tally:
            whole, expressed = whole + int(tally[0][0]), expressed + int(tally[0][2])
    assert expressed >= 38 and whole / expressed >= 0.9, (whole, expressed)


def test_param_ids_are_expanded_as_llama_swap_expands_them() -> None:
    """§1.7: `setParamsByID` keys take macros (`${MODEL_ID}:high`), as llama-swap expands
    them: the alias is `gpt:high`, never the text `${MODEL_ID}:high`; the model's own id is
    no alias of itself, but its parameters are said not carried too."""
    (m,) = _models("""
models:
  gpt:
    cmd: llama-server -m g.gguf
    filters:
      setParamsByID:
        "${MODEL_ID}": {reasoning_effort: medium}
        "${MODEL_ID}:high": {reasoning_effort: high}
""").values()
    assert m.aliases == ("gpt:high",)
    assert [n.flag for n in m.notes if not n.kept] == ["setParamsByID.gpt",
                                                        "setParamsByID.gpt:high"]


def test_a_cmd_that_cannot_be_split_costs_that_model_only() -> None:
    """§1.7: an unclosed quote in one model's `cmd` (llama-swap could not start that model
    either) leaves that model without a command and a note saying why; the others are read."""
    models = _models("""
models:
  a: {cmd: "llama-server -m 'a.gguf"}
  b: {cmd: "llama-server -m b.gguf"}
""")
    assert models["a"].argv == () and models["b"].argv == ("llama-server", "-m", "b.gguf")
    (note,) = models["a"].notes
    assert note.flag == "cmd" and not note.kept and "No closing quotation" in note.what
