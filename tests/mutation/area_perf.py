"""Mutants of the observer's cheaper reads (issue 27 item 6): each breaks a rule the
faster code must keep (§3 ownership read from /proc; every role observed as itself)."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("platform/procfs.py", "owned-reads-recycled-environ",
           '        if state == b"Z" or not ownership.same_start(recorded_create_time, created):\n'
           "            return None\n",
           "        pass\n",
           "§3: the environment of a recycled pid (another process's) is read for our marker",
           "tests/safety"),
    mutant("platform/procfs.py", "owned-reads-no-recheck",
           '    if state == b"Z" or again != start:\n        return None\n',
           "    pass\n",
           "§3: a marker read while the recorded process left its pid is taken as ours",
           "tests/safety"),
    mutant("platform/procfs.py", "owned-reads-zombie-recheck",
           '    if state == b"Z" or again != start:\n',
           "    if again != start:\n",
           "§3: a server that became a zombie while its marker was read counts as alive and ours",
           "tests/safety"),
    mutant("platform/procfs.py", "boot-time-per-process",
           "    if _BOOT[1] < 0 or now - _BOOT[1] > 1.0:\n",
           "    if True:\n",
           "the observer reads /proc/stat once per recorded server again (CPU per pass)",
           "tests/safety"),
    mutant("world/observe.py", "targets-without-models",
           "    out = [_target(n, specs.get(n), records.get(n), models.get)",
           "    out = [_target(n, specs.get(n), records.get(n), lambda name: None)",
           "§4: an Ollama role is asked for no tag (its Model not looked up): never 'not listed'",
           "tests/observe"),
)
