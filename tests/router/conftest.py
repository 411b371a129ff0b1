"""Fixtures for the router's end-to-end tests: a world with a router, a daemon, an ``openai`` client."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import free_port, wait_for, world  # noqa: F401  (a fixture)
from tests.watch.test_watch_e2e import WatchDaemon


class RoutedWorld:
    """A world whose node has a router, and the ``reconcile watch`` that serves it."""

    def __init__(self, world, started: list) -> None:
        self.world = world
        self.router_port = free_port()
        self._started = started
        self.daemon: WatchDaemon | None = None

    def node(self, router: str = "", **kwargs) -> None:
        extra = f"  router: {{listen: \"127.0.0.1:{self.router_port}\"{router}}}"
        self.world.node(extra=extra, **kwargs)

    def start(self, *args: str) -> WatchDaemon:
        self.daemon = WatchDaemon(self.world, "--log-format", "json", *args)
        self._started.append(self.daemon)
        listening = wait_for(lambda: re.search(r"router listening on http://127\.0\.0\.1:(\d+)",
                                               self.daemon.log), 15)
        assert listening, self.daemon.log
        return self.daemon

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def client(self, key: str = "none", **kwargs):
        import openai

        return openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=key, max_retries=0,
                             **kwargs)


@pytest.fixture
def routed(world):
    started: list[WatchDaemon] = []
    yield RoutedWorld(world, started)
    for d in started:
        d.kill()
