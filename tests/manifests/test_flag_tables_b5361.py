"""§1.4 per version: llama-server b5361's table against its real ``--help``, and the spellings
users write for older builds (``--draft-max``, ``--draft-min``, ``--no-mmap``).

b5361 is llama.cpp commit cf0a43bb, the tree inside the PyPI sdist
``llama-cpp-server-py-core==0.1.4`` (its git submodule at that commit; llama.cpp's own
Windows release of it says ``version: 5361 (cf0a43bb)``). It is compiled by hand, not by
``make testbed`` (a second ~10-minute compile), so its ``--help`` is kept as a capture
(``corpus/help/llama-server-b5361.txt``, taken from that binary, built as
``testbed/setup.sh`` builds b11434 but with ``cmake/build-info.cmake``'s ``BUILD_NUMBER``
set to 5361 and ``BUILD_COMMIT`` to cf0a43bb: that build predates ``-DLLAMA_BUILD_NUMBER``);
where such a binary is built, ``tools/flagtable.py BIN --check-capture FILE`` checks the capture
against it (the checker itself is tested here with stand-in binaries).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.core.desired import Runtime
from reconciler.manifests.extra_args import check
from reconciler.runtimes import llamacpp_tables
from tests.manifests.test_flag_tables import help_flags

CORPUS = Path(__file__).parent / "corpus"
HELP = CORPUS / "help" / "llama-server-b5361.txt"
TOOL = Path(__file__).parents[2] / "tools" / "flagtable.py"
OLDER = yaml.safe_load((CORPUS / "older-builds.yaml").read_text())


def test_b5361s_table_matches_its_real_help_both_ways():
    """§1.4: every spelling of b5361's --help is in its table with its number of values, and
    back; the table names its build; it takes --draft-max, --draft-min and --no-mmap."""
    real = help_flags(HELP.read_text(), "")
    assert len(real) > 100, f"could not read {HELP}"
    table = llamacpp_tables.TABLES[5361]
    assert table.version == "b5361"
    assert sorted(s for s in real if s not in table) == [], "in b5361's --help, not its table"
    assert sorted(s for s in table if s not in real) == [], "in b5361's table, not its --help"
    assert sorted(s for s, arity in real.items() if table[s].arity != arity) == []
    for spelling in ("--draft-max", "--draft-min", "--no-mmap", "--mlock"):
        assert table.find(spelling) is not None and not table.find(spelling).instead


def _fake_server(tmp_path: Path, help_text: str) -> Path:
    """An executable that prints ``help_text`` for ``--help``, as llama-server does."""
    (tmp_path / "help.txt").write_text(help_text)
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!/bin/sh\ncat '{tmp_path / 'help.txt'}'\n")
    exe.chmod(0o755)
    return exe


def test_the_capture_checker_tells_a_binary_with_that_help_from_one_without(tmp_path):
    """The stored --help is checked against a real b5361 binary with ``tools/flagtable.py
    BIN --check-capture FILE`` (``make testbed`` compiles no b5361; §1.4). The checker says
    equal for a binary printing the capture, and names the spelling of one that lost a
    flag or changed its number of values."""
    text = HELP.read_text()

    def check(help_text: str) -> subprocess.CompletedProcess:
        exe = _fake_server(tmp_path, help_text)
        return subprocess.run([sys.executable, str(TOOL), str(exe), "--check-capture",
                               str(HELP)], capture_output=True, text=True, timeout=60)

    same = check(text)
    assert same.returncode == 0 and "the capture is the binary's help" in same.stdout, same
    lost = check("\n".join(ln for ln in text.splitlines() if "--draft-max" not in ln))
    assert lost.returncode == 1 and "--draft-max: the binary says absent" in lost.stdout, lost
    assert check("").returncode == 1


@pytest.mark.parametrize("entry", OLDER, ids=lambda e: e["source"].split("/")[-1][:40])
def test_older_builds_spellings_are_theirs_and_refused_by_b11434_with_the_rename(entry):
    """§1.4 corpus: a real line written for an older build validates for a Program of that
    version (its own table, or the nearest older one's); for b11434 each renamed spelling is
    refused, the refusal naming b11434 and what b11434 calls it."""
    args = entry["extra_args"]
    assert check(Runtime.LLAMACPP, args, version=entry["version"]) == []
    refused = dict(check(Runtime.LLAMACPP, args, version="b11434"))
    for old, new in entry["renamed"].items():
        why = refused.get(args.index(old))
        assert why is not None, f"b11434 accepted {old}"
        assert "llama-server b11434" in why and new in why, why
