"""The daemon's place for the router (SHELL; BEHAVIOUR §9).

``watch.Daemon`` owns one ``RouterSlot``. The slot starts the router with the
first good desired state whose NodeConfig has a ``router``, restarts it when
that configuration changes, closes it when it goes away, and carries the two
hand-offs of every pass: the demand snapshot the pass starts from, and the
pass's result, which releases the waiters of a role that is ready; and, while the
pass acts, the ``gate`` its stops go through (the router drains a role first). The router
itself (``router/service.py``, aiohttp) is made by a factory, so a node
without a router never imports it.
"""

from __future__ import annotations

import logging
from typing import Callable

from reconciler.core.demand import Demand
from reconciler.report import logs


class RouterSlot:
    """The running router, if any, and the configuration it was started with."""

    def __init__(self, factory: Callable | None, wake: Callable[[], None], began: float) -> None:
        self._factory = factory  # (RouterConfig, wake) -> router/service.Router-like; None: never
        self._wake = wake  # called by the router when a request waits: a pass now
        self._began = began  # demand is counted from the daemon's start
        self._config = None
        self.router = None

    def demand(self):
        """(The router's demand now, its sequence number); none yet before it runs."""
        if self.router is not None:
            return self.router.demand()
        if self._factory is None:
            return None, 0
        return Demand(since=self._began), 0

    @property
    def gate(self):
        """What the pass's stops ask first (§9 ``before_stop``: close, drain); None: no router."""
        return self.router if self.router is not None and hasattr(self.router,
                                                                   "before_stop") else None

    def publish(self, config, result, seq: int) -> None:
        """(Re)start the router when ``config`` changed; hand it the pass's result."""
        if self._factory is None:
            return
        if config != self._config:
            self.close()
            self._config = config
            if config is not None:
                self.router = self._start(config)
        if self.router is not None:
            self.router.publish(result, seq)

    def close(self) -> None:
        if self.router is not None:
            self.router.close()
            self.router = None

    def _start(self, config):
        try:
            router = self._factory(config, self._wake)
            router.start()
        except (OSError, ValueError) as exc:
            logs.emit(f"cannot start the router on {config.listen}: {exc}; it starts when "
                      "its configuration changes", level=logging.ERROR, event="error")
            return None
        host, port = router.address
        logs.emit(f"router listening on http://{'[' + host + ']' if ':' in host else host}:"
                  f"{port}", event="router", router_addr=f"{host}:{port}")
        return router
