"""The extra_args allowlist (BEHAVIOUR §1.4): the bypass list, arity, and the real server's --help."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from reconciler.manifests import extra_args
from reconciler.manifests.extra_args import OWNED, check
from reconciler.core.desired import Runtime
from reconciler.runtimes import SPECS, spec_of

LLAMA, MLX, OLLAMA = Runtime.LLAMACPP, Runtime.MLX_LM, Runtime.OLLAMA
LLAMA_SERVER = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed")) / "bin" / "llama-server"

BYPASSES = [
    (LLAMA, ["--hos", "0.0.0.0"]),  # prefix abbreviation of --host
    (LLAMA, ["--host", "0.0.0.0"]),
    (LLAMA, ["--port", "1"]),
    (LLAMA, ["-m", "/x.gguf"]),
    (LLAMA, ["--model", "/x.gguf"]),
    (LLAMA, ["--mod", "/x.gguf"]),
    (LLAMA, ["-md", "/x.gguf"]),  # alias of --model-draft
    (LLAMA, ["--model-dr", "/x.gguf"]),
    (LLAMA, ["-c", "4096"]),
    (LLAMA, ["--ctx-size", "4096"]),
    (LLAMA, ["-ctk", "q8_0"]),
    (LLAMA, ["--cache-type-v", "q8_0"]),
    (LLAMA, ["--alias", "x"]),
    (LLAMA, ["--host=0.0.0.0"]),
    (LLAMA, ["--threads=4"]),
    (LLAMA, ["--jinja=1"]),
    (LLAMA, ["4 --host 0.0.0.0"]),
    (LLAMA, ["--threads", "4 --host 0.0.0.0"]),
    (LLAMA, ["$(id)"]),
    (LLAMA, ["--threads", "$(id)"]),
    (LLAMA, ["--threads", "`id`"]),
    (LLAMA, ["--threads\t4"]),
    (LLAMA, ["--jinja\n--host"]),
    (LLAMA, ["--threads", "4\n"]),
    (LLAMA, ["--threads", "4", "\x00"]),
    (LLAMA, ["--threads", "--host"]),  # a flag-looking value
    (LLAMA, ["--threads", "-host"]),
    (LLAMA, ["--threads"]),  # arity: the value is missing
    (LLAMA, ["--threads", ""]),
    (LLAMA, ["--threads", "9" * 257]),
    (LLAMA, ["--THREADS", "4"]),
    (LLAMA, ["\u2014threads", "4"]),  # em dash
    (LLAMA, ["--threads", "\uff14"]),  # fullwidth digit
    (LLAMA, ["--flash-attn", "maybe"]),
    (LLAMA, ["0.0.0.0"]),  # a value without its flag
    (LLAMA, [4]),
    (LLAMA, ["--threads", 4]),
    (LLAMA, ["--jinja"] * 33),
    (MLX, ["--host", "0.0.0.0"]),
    (MLX, ["--model", "/x"]),
    (MLX, ["--trust-remote-code"]),
    (MLX, ["--threads", "4"]),  # a llama.cpp flag
    (OLLAMA, ["--threads", "4"]),
]

ALLOWED_ARGS = [
    (LLAMA, []),
    (LLAMA, ["--threads", "8", "--jinja", "--no-webui"]),
    (LLAMA, ["-t", "8", "-ngl", "99", "-fa", "auto", "--cont-batching"]),
    (LLAMA, ["--seed", "-1", "--temp", "0.7", "--top-p", ".9", "--repeat-penalty", "1e0"]),
    (LLAMA, ["--jinja"] * 32),
    (MLX, ["--max-tokens", "512", "--log-level", "INFO", "--temp", "0.2"]),
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
        (1, "the value '--jinja' of --threads may start with '-' only if it is a number")]


def test_messages_point_at_the_entry() -> None:
    """Findings carry the index of the offending entry, or None for the list."""
    assert [i for i, _ in check(LLAMA, ["--jinja", "--hos", "x"])] == [1, 2]
    assert check(OLLAMA, ["--x"])[0][0] is None


def test_owned_flags_are_on_no_list() -> None:
    """No reconciler-owned flag (host, port, model, draft, ctx, kv, alias) is allowed anywhere."""
    for rt in SPECS.values():
        assert not set(rt.flags) & set(OWNED)
    assert spec_of(OLLAMA).flags == {}


def _help_flags(help_text: str) -> dict[str, int]:
    """Every flag spelling of ``llama-server --help`` → its arity (0, or 1 when a VALUE follows).

    Help lines look like ``-t,    --threads N          description`` or
    ``--jinja, --no-jinja          description``: spellings separated by ", ", the
    last one maybe followed by a value placeholder, then two spaces and the text.
    """
    flags: dict[str, int] = {}
    for line in help_text.splitlines():
        if not line.startswith("-"):
            continue
        spellings, arity = [], 0
        tokens = line.split()
        for i, token in enumerate(tokens):
            if not token.startswith("-"):
                break
            spellings.append(token.rstrip(","))
            if token.endswith(","):
                continue
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            arity = 1 if re.fullmatch(r"[A-Z][A-Z0-9_]*|[\[<{].*", following) else 0
            break
        for spelling in spellings:
            flags[spelling] = arity
    return flags


def test_help_parser_reads_spellings_and_arity() -> None:
    """The --help reader itself: aliases, a value placeholder, a switch pair."""
    text = ("-t,    --threads N      threads\n"
            "--jinja, --no-jinja     jinja\n"
            "-fa,   --flash-attn [on|off|auto]   fa\n"
            "not a flag line\n")
    assert _help_flags(text) == {"-t": 1, "--threads": 1, "--jinja": 0, "--no-jinja": 0,
                                 "-fa": 1, "--flash-attn": 1}


def test_llamacpp_table_matches_the_real_llama_server() -> None:
    """Every allowed llamacpp flag exists with the same arity in the real llama-server's --help."""
    if not LLAMA_SERVER.exists():
        message = f"the real llama-server is missing ({LLAMA_SERVER}): run `bash testbed/setup.sh`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(reason=message)
    done = subprocess.run([str(LLAMA_SERVER), "--help"], capture_output=True, text=True,
                          timeout=30)
    real = _help_flags(done.stdout + done.stderr)
    assert len(real) > 100, "could not read llama-server --help"
    for spelling, flag in spec_of(LLAMA).flags.items():
        assert real.get(spelling) == flag.arity, spelling
    for owned in OWNED:
        assert owned in real, f"{owned} is no longer a llama-server flag: update OWNED"


def test_limits_match_behaviour() -> None:
    """At most 32 entries and 256 characters per value (BEHAVIOUR §1.4)."""
    assert (extra_args.MAX_ENTRIES, extra_args.MAX_VALUE_CHARS) == (32, 256)


def test_an_empty_value_is_named_as_empty() -> None:
    """An empty value is refused with a message that says so (not as bad characters)."""
    assert check(LLAMA, ["--threads", ""]) == [(1, "the value of --threads must not be empty")]
