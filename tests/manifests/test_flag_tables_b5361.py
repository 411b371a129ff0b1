"""§1.4 per version: llama-server b5361's table against its real ``--help``, and the spellings
users write for older builds (``--draft-max``, ``--draft-min``, ``--no-mmap``).

b5361 is llama.cpp commit cf0a43bb, the tree inside the PyPI sdist
``llama-cpp-server-py-core==0.1.4`` (its git submodule at that commit; llama.cpp's own
Windows release of it says ``version: 5361 (cf0a43bb)``). It is compiled by hand, not by
``make testbed`` (a second ~10-minute compile), so its ``--help`` is kept as a capture
(``corpus/help/llama-server-b5361.txt``, taken from that binary, built as
``testbed/setup.sh`` builds b11434 but with ``cmake/build-info.cmake``'s ``BUILD_NUMBER``
set to 5361 and ``BUILD_COMMIT`` to cf0a43bb: that build predates ``-DLLAMA_BUILD_NUMBER``);
where such a binary is at ``$RECONCILER_LLAMA_B5361`` the capture is checked against it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from reconciler.core.desired import Runtime
from reconciler.manifests.extra_args import check
from reconciler.runtimes import llamacpp_tables
from tests.manifests.test_flag_tables import help_flags

CORPUS = Path(__file__).parent / "corpus"
HELP = CORPUS / "help" / "llama-server-b5361.txt"
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


def test_the_capture_is_the_real_binarys_help():
    """The stored --help is what a b5361 llama-server prints (where one is built here), and
    its --version says build 5361 (compiled with its real number)."""
    binary = os.environ.get("RECONCILER_LLAMA_B5361")
    if not binary:
        pytest.skip("no b5361 llama-server here (RECONCILER_LLAMA_B5361): the capture is checked")
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    assert help_flags(done.stdout + done.stderr, "") == help_flags(HELP.read_text(), "")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    assert "version: 5361 (cf0a43bb)" in version.stdout + version.stderr


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
