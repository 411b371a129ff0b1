"""Fixtures for the watch tests.

The end-to-end fixtures (``world``: a /var/tmp directory reachable by the
servers' uid, the real Model digest, a teardown that kills every process of
the world) live in ``tests/e2e/conftest.py``; importing the fixture here
makes ``tests/watch`` use the same one. Fakes for in-process tests are in
``tests/support/fakes.py`` (shared with other tests).
"""

from __future__ import annotations

from tests.e2e.conftest import world  # noqa: F401  (a fixture)
