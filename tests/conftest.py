"""Shared pytest configuration: Hypothesis profiles.

``default`` is quick (50 examples) for the edit-test loop; ``ci`` runs 500
examples per property. Pick one with ``HYPOTHESIS_PROFILE=ci``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (``make test`` runs two workers) every test with real servers
    (``e2e``, ``mlx``) goes to one worker, in file order, as one group: they mostly wait on
    servers and clocks, so the pure tests run beside them on the other worker. One group,
    not several, because those tests were written to run one at a time (ports, a busy
    machine's timings)."""
    import pytest

    for item in items:
        if item.get_closest_marker("e2e") or item.get_closest_marker("mlx"):
            item.add_marker(pytest.mark.xdist_group("servers"))
