"""Mutants of the router's rules (BEHAVIOUR §9), each killed by a test that names its rule."""

from __future__ import annotations

from tests.mutation.mutant import mutant

MUTANTS = (
    mutant("router/proxy.py", "ambiguous-credential-taken",
           "if (twice := rules.ambiguous(request.headers.items())) is not None:",
           "if (twice := rules.ambiguous(request.headers.items())) is not None and False:",
           "§9: of two Authorization headers the first is taken (RFC 9110: a singleton)",
           "tests/router"),
    mutant("router/rules.py", "client-x-api-key-forwarded",
           '"host", "content-length", "authorization", "x-api-key",',
           '"host", "content-length", "authorization",',
           "§9: a client's X-Api-Key reaches the role's server", "tests/router"),
    mutant("router/guard.py", "closed-transport-cycle",
           "        transport._read_ready_cb = None", "        pass",
           "§9: each closed connection waits for a full collection (a storm grows the RSS)",
           "tests/router/test_hostile.py"),
    mutant("router/guard.py", "refused-handler-cycle",
           "            self._parser = None", "            pass",
           "§9: a handler refused over the cap waits for a full collection",
           "tests/router/test_hostile.py"),
    mutant("router/upstream.py", "stream-transport-cycle",
           "        guard.release(self._transport)", "        pass",
           "§9: each stream's upstream connection waits for a full collection",
           "tests/router/test_hostile.py"),
)
