"""The extra_args checker (BEHAVIOUR §1.4): the bypass list, arity, types, classes.

The tables themselves are checked against the real servers' --help in test_flag_tables.py."""

from __future__ import annotations

import pytest

from reconciler.manifests import extra_args
from reconciler.manifests.extra_args import check
from reconciler.core.desired import Runtime
from reconciler.runtimes import SPECS, flags_for, lookup, spec_of
from reconciler.runtimes.flags import REFUSED, FlagClass, split

LLAMA, MLX, OLLAMA = Runtime.LLAMACPP, Runtime.MLX_LM, Runtime.OLLAMA

BYPASSES = [
    (LLAMA, ["--hos", "0.0.0.0"]),  # prefix abbreviation of --host
    (LLAMA, ["--host", "0.0.0.0"]),
    (LLAMA, ["--port", "1"]),
    (LLAMA, ["-m", "/x.gguf"]),
    (LLAMA, ["--model", "/x.gguf"]),
    (LLAMA, ["--model=/x.gguf"]),
    (LLAMA, ["--mod", "/x.gguf"]),
    (LLAMA, ["-md", "/x.gguf"]),  # alias of --model-draft
    (LLAMA, ["--spec-draft-model", "/x.gguf"]),
    (LLAMA, ["--model-dr", "/x.gguf"]),
    (LLAMA, ["--model_draft", "/x.gguf"]),  # llama-server reads _ as -
    (LLAMA, ["-c", "4096"]),
    (LLAMA, ["--ctx-size", "4096"]),
    (LLAMA, ["--ctx_size", "4096"]),
    (LLAMA, ["-ctk", "q8_0"]),
    (LLAMA, ["--cache-type-v", "q8_0"]),
    (LLAMA, ["--alias", "x"]),
    (LLAMA, ["--host=0.0.0.0"]),
    (LLAMA, ["--jinja=1"]),  # a switch takes no value
    (LLAMA, ["-hf", "org/repo"]),
    (LLAMA, ["--hf-repo=org/repo"]),
    (LLAMA, ["--mmproj", "/x.gguf"]),
    (LLAMA, ["--lora", "/x.gguf"]),
    (LLAMA, ["--rpc", "1.2.3.4:50052"]),
    (LLAMA, ["--api-key", "secret"]),
    (LLAMA, ["--api-key-file", "/k"]),
    (LLAMA, ["--api-prefix", "/x"]),
    (LLAMA, ["--models-dir", "/m"]),
    (LLAMA, ["--help"]),
    (LLAMA, ["--log-file", "/tmp/x"]),
    (LLAMA, ["--chat-template-file", "/etc/passwd"]),  # absolute: not a repository file
    (LLAMA, ["--chat-template-file", "~/t.jinja"]),
    (LLAMA, ["4 --host 0.0.0.0"]),
    (LLAMA, ["$(id)"]),
    (LLAMA, ["--threads", "$(id)"]),  # not an integer
    (LLAMA, ["--threads", "`id`"]),
    (LLAMA, ["--threads\t4"]),
    (LLAMA, ["--jinja\n--host"]),
    (LLAMA, ["--threads", "4\n"]),
    (LLAMA, ["--chat-template", "a\nb"]),  # a line break in free text
    (LLAMA, ["--chat-template", "a\x00b"]),
    (LLAMA, ["--chat-template", "x" * 4097]),
    (LLAMA, ["--threads", "4", "\x00"]),
    (LLAMA, ["--threads", "--host"]),  # a flag-looking value
    (LLAMA, ["--threads", "-host"]),
    (LLAMA, ["--reverse-prompt", "-m"]),
    (LLAMA, ["--temp", "--host=0.0.0.0"]),
    (LLAMA, ["--threads"]),  # arity: the value is missing
    (LLAMA, ["--threads", ""]),
    (LLAMA, ["--threads", "1.5"]),
    (LLAMA, ["--temp", "hot"]),
    (LLAMA, ["--chat-template-kwargs", "{not json"]),
    (LLAMA, ["--spec-type", "ngram-mod,warp"]),
    (LLAMA, ["--THREADS", "4"]),
    (LLAMA, ["\u2014threads", "4"]),  # em dash
    (LLAMA, ["--threads", "\uff14"]),  # fullwidth digit
    (LLAMA, ["--flash-attn", "maybe"]),
    (LLAMA, ["-fa"]),  # takes a value in this llama-server
    (LLAMA, ["0.0.0.0"]),  # a value without its flag
    (LLAMA, [4]),
    (LLAMA, ["--threads", 4]),
    (LLAMA, ["--jinja"] * 129),
    (MLX, ["--host", "0.0.0.0"]),
    (MLX, ["--model", "/x"]),
    (MLX, ["--model=/x"]),
    (MLX, ["--adapter-path", "/x"]),
    (MLX, ["--draft-model", "/x"]),
    (MLX, ["--trust-remote-code"]),
    (MLX, ["--max", "4"]),  # argparse would expand it; the reconciler does not
    (MLX, ["--threads", "4"]),  # a llama.cpp flag
    (MLX, ["--max_tokens", "4"]),  # argparse does not read _ as -
    (OLLAMA, ["--threads", "4"]),
]

ALLOWED_ARGS = [
    (LLAMA, []),
    (LLAMA, ["--threads", "8", "--jinja", "--no-webui"]),
    (LLAMA, ["-t", "8", "-ngl", "99", "-fa", "auto", "--cont-batching", "-cb"]),
    (LLAMA, ["--gpu-layers", "all", "--n-gpu-layers", "99", "-ngl", "auto"]),
    (LLAMA, ["--seed", "-1", "--temp", "0.7", "--top-p", ".9", "--repeat-penalty", "1e0"]),
    (LLAMA, ["--threads=4", "--temp=0.5", "--ctx_checkpoints", "8"]),
    (LLAMA, ["-ot", r"blk\..*_exps\.=CPU", "-ts", "1,0,0", "--split-mode", "row"]),
    (LLAMA, ["--chat-template-kwargs", '{"enable_thinking": false}']),
    (LLAMA, ["--override-kv", "tokenizer.ggml.add_bos_token=bool:false"]),
    (LLAMA, ["--chat-template-file", "templates/chat.jinja", "--grammar-file=g.gbnf"]),
    (LLAMA, ["--spec-type", "ngram-mod,draft-simple", "--control-vector-layer-range", "1", "4"]),
    (LLAMA, ["--reverse-prompt", "User: stop"]),
    (LLAMA, ["--jinja"] * 128),
    (MLX, ["--max-tokens", "512", "--log-level", "INFO", "--temp", "0.2"]),
    (MLX, ["--chat-template-args={\"enable_thinking\":false}", "--prompt-cache-bytes", "8GB"]),
    (OLLAMA, []),
]


@pytest.mark.parametrize(("runtime", "args"), BYPASSES, ids=repr)
def test_bypass_is_refused(runtime: Runtime, args: list) -> None:
    """Every known way to smuggle host, port, model or shell syntax is refused."""
    assert check(runtime, args)


@pytest.mark.parametrize(("runtime", "args"), ALLOWED_ARGS, ids=repr)
def test_allowed_args_pass(runtime: Runtime, args: list) -> None:
    """Allowed spellings with well-formed values (including negative numbers) pass."""
    assert check(runtime, args) == []


def test_arity_consumes_values() -> None:
    """A value is consumed by its flag: '--threads --jinja' is a bad value, not two flags."""
    assert check(LLAMA, ["--threads", "--jinja"]) == [
        (1, "the value '--jinja' of --threads may start with '-' only if it is a number "
            "(a server would read it as a flag; --threads takes a value)")]


def test_messages_point_at_the_entry() -> None:
    """Findings carry the index of the offending entry, or None for the list."""
    assert [i for i, _ in check(LLAMA, ["--jinja", "--hos", "x"])] == [1, 2]
    assert check(OLLAMA, ["--x"])[0][0] is None


def test_refusals_say_what_to_write_instead() -> None:
    """Owned, weight, network and expectation flags name the field or the reason."""
    assert check(LLAMA, ["-ctk", "q8_0"]) == [
        (0, "-ctk belongs to the reconciler: set spec.serve.cache_type_k (or kv_quant for both)")]
    assert "spec.serve.mmproj: MODEL" in check(LLAMA, ["--mmproj", "x.gguf"])[0][1]
    assert "a Model with a pinned `source` (`reconcile models add hf://" in check(LLAMA, ["-hf", "a/b"])[0][1]
    assert "reaches the network" in check(LLAMA, ["-hf", "a/b"])[0][1]
    assert "spec.serve.adapter: MODEL" in check(MLX, ["--adapter-path", "x"])[0][1]
    assert "verifies" in check(MLX, ["--trust-remote-code"])[0][1]


def test_every_spelling_means_its_flag() -> None:
    """lookup finds each spelling, llama-server's `_` for `-`, and split cuts `=` once."""
    ngl = lookup(LLAMA, "-ngl")
    assert ngl is not None and ngl is lookup(LLAMA, "--gpu-layers") is lookup(LLAMA, "--n_gpu_layers")
    assert lookup(MLX, "--max_tokens") is None
    assert split(spec_of(LLAMA).flags, "--override-kv=a=int:1") == ("--override-kv", "a=int:1")
    assert split(spec_of(LLAMA).flags, "--jinja=1") == ("--jinja=1", None)
    assert split(spec_of(LLAMA).flags, "blk=CPU") == ("blk=CPU", None)


def test_limits_match_behaviour() -> None:
    """At most 128 entries and 4 KiB per value (BEHAVIOUR §1.4)."""
    assert (extra_args.MAX_ENTRIES, extra_args.MAX_VALUE_CHARS) == (128, 4096)


def test_a_value_of_exactly_4_kib_is_fine() -> None:
    """§1.4 the value-length limit is 4 KiB *inclusive*: an extra_args value or a role's env
    value of exactly 4096 characters is fine, one more is refused."""
    from reconciler.manifests import roleextras

    limit = extra_args.MAX_VALUE_CHARS
    assert check(LLAMA, ["--reverse-prompt", "x" * limit]) == []
    assert check(LLAMA, ["--reverse-prompt", "x" * (limit + 1)]) == [
        (1, f"the value of --reverse-prompt must be at most {limit} characters")]
    assert roleextras.env_problem(LLAMA, "GGML_X", "x" * limit) is None
    assert roleextras.env_problem(LLAMA, "GGML_X", "x" * (limit + 1)) is not None


@pytest.mark.parametrize(("args", "cls", "why"), [
    (["--reuse-port"], FlagClass.EXPECTS, "another process answer on the role's port"),
    (["--hf-token", "hf_x"], FlagClass.NETWORK, "fetch.hf_token_file"),
    (["-hft", "hf_x"], FlagClass.NETWORK, "fetch.hf_token_file"),
    (["--tools", "all"], FlagClass.EXPECTS, "shell commands"),
], ids=["reuse-port", "hf-token", "hft", "tools"])
def test_reuse_port_hf_token_and_tools_are_refused(args: list, cls: FlagClass, why: str) -> None:
    """§1.4 `--reuse-port` (another process on the role's port), `--hf-token` (a secret in git;
    the node fetches) and `--tools` (shell commands on the node) are refused, each in its
    refused class: a role's extra_args naming one is an error that says why."""
    found = lookup(LLAMA, args[0])
    assert found is not None and found.cls is cls and cls in REFUSED
    (finding,) = check(LLAMA, args)
    assert finding[0] == 0 and why in finding[1], finding


def test_an_empty_value_is_named_as_empty() -> None:
    """An empty value is refused with a message that says so (not as bad characters)."""
    assert check(LLAMA, ["--threads", ""]) == [(1, "the value of --threads must not be empty")]


def test_refused_classes_are_never_allowed() -> None:
    """Every flag of a refused class is refused in every spelling, with or without a value."""
    for rt in SPECS.values():
        for spelling, found in rt.flags.items():
            if found.cls in REFUSED:
                use = [spelling] + ["1"] * found.arity
                assert check(rt.runtime, use), use
    assert spec_of(OLLAMA).flags == {}
    assert {f.cls for f in spec_of(LLAMA).flags.values()} == set(FlagClass)


def test_old_and_foreign_spellings_say_what_this_server_takes() -> None:
    """A flag this llama-server dropped or never had is refused with its replacement."""
    assert check(LLAMA, ["--no-mmap"]) == [
        (0, "'--no-mmap' is not a flag of llama-server b11434 (renamed --load-mode after "
            "b10068): this llama-server says `--load-mode none` (or `-lm mlock`)")]
    assert "ik_llama.cpp" in check(LLAMA, ["-fmoe"])[0][1]
    assert any("(on, off, auto" in m for _, m in check(LLAMA, ["-fa", "-t", "1"]))


_CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0))]


@pytest.mark.parametrize("char", _CONTROLS, ids=[f"U+{ord(c):04X}" for c in _CONTROLS])
def test_a_free_text_value_refuses_control_characters(char: str) -> None:
    """Rule (issue 17's hidden corpus): a free-text extra_args value reaches the plan's argv
    lines, so like every printed manifest text it refuses C0, DEL and C1 controls (ESC, CSI,
    NEL) as well as NUL and line breaks; a tab and any printable text stay fine."""
    [(index, message)] = check(LLAMA, ["--chat-template", f"{{{{ x }}}}{char}[2J"])
    assert index == 1 and "control characters" in message
    assert check(LLAMA, ["--chat-template", "{{ x }}\t{{ y }} é ☃"]) == []


#: Spellings real command lines carry for builds before b11434 (issue 29's corpus).
_OLDER_SPELLINGS = [["--no-mmap"], ["--mmap"], ["--mlock"], ["--no-mmap", "--mlock"], ["-dio"],
                    ["--direct-io"], ["--no-direct-io"], ["--tts-use-guide-tokens"]]


@pytest.mark.parametrize("args", _OLDER_SPELLINGS, ids=" ".join)
def test_older_spellings_are_flags_of_a_program_of_that_build(args: list[str]) -> None:
    """§1.4 per version: a role whose Program is b10068 (the prebuilt wheel's build) is judged
    by b10068's table, where --no-mmap, --mlock, --direct-io are flags; the same list for
    b11434 (or an unpinned path: the testbed's build) is refused, naming the build."""
    assert check(LLAMA, args, version="b10068") == []
    for version in ("b11434", None):
        refused = check(LLAMA, args, version=version)
        assert refused and all("llama-server b11434" in m for _, m in refused), refused


def test_newer_flags_are_refused_for_an_older_build_naming_it() -> None:
    """§1.4 a flag b11434 added (--load-mode, --reasoning-effort) is refused for a b10068
    Program, the refusal naming b10068; a removed flag's refusal names its build too."""
    assert check(LLAMA, ["--load-mode", "none"], version="b11434") == []
    message = check(LLAMA, ["--load-mode", "none"], version="b10068")[0][1]
    assert message.startswith("'--load-mode' is not a flag of llama-server b10068")
    assert check(LLAMA, ["--reasoning-effort", "high"], version="b10068")[0][1].startswith(
        "'--reasoning-effort' is not a flag of llama-server b10068")
    for version in ("b10068", "b11434"):  # --draft-max: removed in both (their --help says so)
        [(index, message)] = check(LLAMA, ["--draft-max", "4"], version=version)
        assert index == 0
        assert f"removed from llama-server {version} (it exits with an error)" in message


@pytest.mark.parametrize(("version", "judged_by"), [
    ("b10068", "b10068"), ("b11434", "b11434"), ("b10500", "b10068"), ("b11433", "b10068"),
    ("b11435", "b11434"), ("b20000", "b11434"), ("b9000", "b5361"), ("10068", "b10068"),
    ("b5361", "b5361"), ("b5142", "b5361"), ("1.2.3", "b11434")])
def test_a_version_without_a_table_takes_the_nearest_older(version: str, judged_by: str) -> None:
    """§1.4 a build with no table of its own is judged by the nearest older build's (the
    oldest's when none is older; the newest's for a version that is no build number)."""
    assert flags_for(LLAMA, version).version == judged_by
    assert flags_for(LLAMA, None).version == "b11434"  # an unpinned path: the testbed's


@pytest.mark.parametrize(("spelling", "why"), [
    ("--no-mmap", "renamed --load-mode after b10068"), ("-dio", "renamed --load-mode after b10068"),
    ("--tts-use-guide-tokens", "a flag of b10068, gone since")])
def test_a_refusal_says_which_older_build_had_the_flag(spelling: str, why: str) -> None:
    """§1.4 a spelling b11434 lacks that b10068's table has is refused naming both builds,
    with its successor when llamacpp_older knows one."""
    message = check(LLAMA, [spelling], version="b11434")[0][1]
    assert message.startswith(f"{spelling!r} is not a flag of llama-server b11434 ({why})")
