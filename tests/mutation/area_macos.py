"""Mutants of the macOS work (issue 32): the platform chosen on a Mac, its kqueue exit watch's
bookkeeping, the GPU's working set on Apple silicon, the launchd job's KeepAlive."""

from __future__ import annotations

from tests.mutation.mutant import mutant

P = "tests/platform"

MUTANTS = (
    mutant("platform/choose.py", "darwin-gets-portable",
           '    return "macos" if system.startswith("darwin") else "portable"',
           '    return "portable"',
           "§3 a Mac without RECONCILER_PLATFORM polls for exits every 0.1 s instead of its kqueue",
           P),
    mutant("platform/kqwatch.py", "esrch-reported-again",
           "            except ProcessLookupError:  # ESRCH: no such process (any more)\n"
           "                self._reported.add(target)",
           "            except ProcessLookupError:  # ESRCH: no such process (any more)\n"
           "                pass",
           "§8 macos: a store naming a dead pid makes every sync report it gone again (a hot "
           "loop of passes)", P),
    mutant("platform/kqwatch.py", "kevent-on-recycled-pid",
           "            if not self._is_running(pid, ctime):", "            if False:",
           "§8 macos: a kevent added on a recycled pid watches another process; the server's "
           "exit is never noticed", P),
)
