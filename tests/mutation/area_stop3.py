"""Mutants of the three modules no other mutant touched at round 4's third stop
(``manifests/programrefs.py``, ``manifests/yamlloaders.py``, ``runtimes/llamacpp_b5361.py``),
each breaking a rule an operator would notice; ``tests/mutation/catalogue.py`` collects them.
"""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("manifests/programrefs.py", "program-of-another-runtime-accepted",
           "    if program is not None and str(program.runtime) != runtime:",
           "    if False:",
           "§14: a role whose Program serves another runtime validates, and its server is "
           "started from the wrong program", "tests/manifests", "tests/programs"),
    mutant("manifests/yamlloaders.py", "no-depth-limit",
           "            if self._depth > MAX_DEPTH:",
           "            if False:",
           "§1: a manifest nested thousands of levels deep crashes the loader (recursion) "
           "instead of a FILE:LINE error", "tests/manifests"),
    mutant("runtimes/llamacpp_b5361.py", "b5361-no-mmap-unknown",
           '    flag("--no-mmap", ValueType.NONE),',
           "",
           "§1.4: --no-mmap, a flag of b5361, is refused for a Program of that build",
           "tests/manifests"),
)
