"""Mutants of the drift fixes of issue 27: one owner per rule, no cycle, the rooms split apart.

The loopback rule asked where a list of its own stood; the marker defined by the ownership
owner alone; the runtimes registry never asked back by a member; the row ↔ record rules and
the ``/metrics`` server in rooms of their own, each pinned where it now lives."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("manifests/llamaswap.py", "proxy-own-loopback-list",
           "    if not is_loopback_host(host):",
           '    if host not in ("127.0.0.1", "localhost", "::1"):',
           "§5: a llama-swap proxy on 127.0.0.2 is dropped as 'not this machine'",
           "tests/manifests/test_import.py"),
    mutant("world/probe.py", "probe-any-host",
           "            if ip_of(host) is None:  # a probe goes to an address, never through DNS",
           "            if False:  # a probe goes to an address, never through DNS",
           "§5: a probe to a host name asks DNS instead of answering 'not an address'",
           "tests/observe/test_wires.py"),
    mutant("runtimes/flags.py", "asks-the-registry",
           "        found = table.find(head)\n",
           "        from reconciler.runtimes import spec_of  # noqa: F401\n        found = table.find(head)\n",
           "the registry's member asks the registry back: an import cycle (the import test)",
           "tests/test_import_direction.py"),
    mutant("planner/identity.py", "marker-own-copy",
           "from reconciler.core.ownership import MARKER_ENV\n",
           'MARKER_ENV = "RECONCILER_INSTANCE"\n',
           "§3: the marker's name spelled outside core/ownership.py, free to drift from the guards'",
           "tests/safety/test_ownership.py"),
    mutant("state/storerows.py", "exit-strict",
           "    values = {k: v for k, v in raw.items() if k in known}\n",
           "    values = dict(raw)\n",
           "§3: a state.db written by a newer reconciler makes every pass fail",
           "tests/store/test_storerows.py"),
    mutant("state/storerows.py", "liveness-strict",
           "    return Liveness(**{k: v for k, v in json.loads(text).items() if k in known})",
           "    return Liveness(**json.loads(text))",
           "§3/§4.1: a newer reconciler's liveness counters make every pass fail",
           "tests/store/test_storerows.py"),
    mutant("report/metricsserver.py", "any-path",
           'if environ.get("PATH_INFO") != "/metrics":',
           "if False:",
           "every path of the metrics port answers with the metrics, not a 404",
           "tests/watch/test_metrics.py"),
)
