"""Mutants of the platform seam's implementations (issue 27 item 3): the facts the safety
rules stand on, as each implementation reads them; ``tests/platform`` runs the one
contract against both, so each mutant below is killed there."""

from __future__ import annotations

from tests.mutation.mutant import mutant

T = "tests/platform"

MUTANTS = (
    mutant("platform/pollwatch.py", "reused-pid-missed",
           "        return self._table.recorded(*target) is None",
           "        return self._table.create_time(target[0]) is None",
           "§8 portable: a server whose pid now holds another process (another create time), "
           "or a zombie, is never seen to exit: no pass until the resync", T),
    mutant("platform/pollwatch.py", "fired-reported-again",
           "            self._reported.update(out.values())", "            pass",
           "§8 portable: a server seen to exit is reported again on every sync while the store "
           "still names it (a hot loop of passes)", T),
    mutant("platform/portable.py", "recorded-recycled-pid",
           "            if not ownership.same_start(create_time, proc.create_time()):\n"
           "                return None  # a recycled pid",
           "            if False:\n                return None  # a recycled pid",
           "§3 portable and linux: a recycled pid (another create time) is taken for the recorded "
           "server: still running, its memory never released", T),
    mutant("platform/portable.py", "recorded-zombie-alive",
           "        if not _alive(proc):\n            return None\n        if marker or proof:",
           "        if marker or proof:",
           "§3/§4: a killed server not yet reaped (a zombie) counts as running", T),
    mutant("platform/portable.py", "look-zombie-alive",
           "        return _seen(proc, proof=proof) if _alive(proc) else None",
           "        return _seen(proc, proof=proof)",
           "§4: a dead process (zombie) is looked at as alive: the survey and the stop's sweep "
           "take it for a live server", T),
    mutant("platform/portable.py", "connected-is-listening",
           "if conn.status != psutil.CONN_LISTEN or not conn.pid",
           "if not conn.pid",
           "§5 portable: a server's connected sockets count as listeners (a connection's "
           "address read as a binding)", T),
    mutant("platform/linux.py", "pidfd-on-recycled-pid",
           "            if not self._is_running(pid, ctime):", "            if False:",
           "§8 linux: a pidfd opened on a recycled pid watches another process; the server's "
           "exit is never noticed", T),
    mutant("platform/choose.py", "linux-everywhere",
           '    return "macos" if system.startswith("darwin") else "portable"',
           '    return "linux"',
           "a Mac without RECONCILER_PLATFORM picks linux: pidfds, /proc and netlink it lacks", T),
)
