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
)
