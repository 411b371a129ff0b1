"""Mutants of the drift fixes of issue 27: the one loopback rule asked where a list of its own stood."""

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
)
