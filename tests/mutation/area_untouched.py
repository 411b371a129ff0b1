"""Mutants of modules no earlier mutant reached (a review listed them): the size and duration
parsers, the YAML reader's duplicate keys, the older llama.cpp spellings, the event rule."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("core/units.py", "size-unbounded", "    if size > MAX_SIZE:\n", "    if False:\n",
           "§1.2: a footprint of 40 TB loads (the ledger's sums overflow what any node has)",
           "tests/manifests"),
    mutant("core/units.py", "duration-infinite",
           "    if not math.isfinite(seconds) or (seconds < 0 and not allow_negative):",
           "    if seconds < 0 and not allow_negative:",
           "§1.2: `inf` or `nan` is a duration (a backoff or idle_after that never ends)",
           "tests/manifests/test_units.py", "tests/manifests"),
    mutant("manifests/yamlsafe.py", "duplicate-key-kept", "            if key in out:\n",
           "            if False:\n",
           "§1: a key written twice loads with the last value, its problem never reported",
           "tests/manifests"),
    mutant("runtimes/llamacpp_older.py", "no-mmap-ignored", '    mmap = "--no-mmap" not in load\n',
           "    mmap = True\n",
           "§1.7: an imported --no-mmap becomes --load-mode mmap (the weights mapped after all)",
           "tests/manifests"),
    mutant("core/events.py", "actions-not-news", "    if (decision.acts or operator_started",
           "    if (False or operator_started",
           "§8: a start, stop or restart leaves no event (reconcile events misses what was done)",
           "tests/store", "tests/watch", "tests/loop"),
)
