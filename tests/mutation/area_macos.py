"""Mutants of the macOS work (issue 32): the platform chosen on a Mac, its kqueue exit watch's
bookkeeping, the GPU's working set on Apple silicon, the launchd job's KeepAlive."""

from __future__ import annotations

from tests.mutation.mutant import Mutant, mutant

P = "tests/platform"
D = "tests/devices"

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
    mutant("world/gpuparse.py", "working-set-is-physical",
           "    return physical * 2 // 3 if physical <= SMALL_MAC else physical * 3 // 4",
           "    return physical",
           "§7.1 capabilities --devices-yaml promises metal:0 the whole Mac's memory: the GPU "
           "may wire only its working set (2/3, 3/4), so placed roles fail to load", D),
    mutant("world/gpuparse.py", "wired-limit-ignored",
           "    if wired_limit_mb:", "    if False:",
           "§7.1 an operator's iogpu.wired_limit_mb is ignored: metal:0 is the default share "
           "whatever the GPU may really wire", D),
    Mutant("launchd/keepalive-always", "deploy/launchd/local.reconciler.watch.plist",
           "\t\t<key>SuccessfulExit</key>\n\t\t<false/>",
           "\t\t<key>SuccessfulExit</key>\n\t\t<true/>",
           "§10 launchd: the daemon is restarted after a clean exit (SIGTERM) and not after a "
           "failure: an operator cannot stop it, and a crash leaves the node unmanaged",
           ("tests/fleet/test_deploy.py",)),
)
