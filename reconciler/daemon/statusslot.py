"""The daemon's place for the status page (SHELL; BEHAVIOUR §11).

``watch.Daemon`` owns one ``StatusSlot``. After every pass it takes the
page's values (``snapshot.take``: the pass's plan, the store's records,
ledger and events) and publishes them to the ``Site``, which pushes a
``pass`` event to every open page: the page is live without polling. The
site is carried by the router on its port (``GET /``) and, when the
NodeConfig has ``status_page``, by a server of its own on that loopback
address, (re)started when that configuration changes.

An invalid manifest set keeps the last good state's page, with the problems
on top ("manifests invalid: showing the last recorded state").
"""

from __future__ import annotations

import logging

import attrs

from reconciler.report import logs


class StatusSlot:
    """The site every server of the page answers from, and the page's own server, if any."""

    def __init__(self, site=None) -> None:
        self.site = site  # statussite.Site; None: no page (tests of the daemon alone)
        self._config = None
        self.server = None

    def publish(self, node, result, problems, store, state_dir: str) -> None:
        """After a pass: (re)start the page's own server when ``node.status_page`` changed,
        and publish the pass's values when something serves the page (router or own)."""
        if self.site is None:
            return
        config = node.status_page if node is not None else None
        if config != self._config:
            self._close_server()
            self._config = config
            if config is not None:
                self.server = self._start(config)
        if node is None or (node.router is None and config is None):
            return  # nobody can see the page: its values are not taken
        from reconciler.report import snapshot

        try:
            if result is not None and result.plan is not None:
                taken = snapshot.take(result, store, problems=problems, applied=True)
                self.site.publish(taken, snapshot.log_dirs(result, store, state_dir))
            else:  # no plan (no good state yet, or the pass failed): the problems, on the last
                self.site.publish(attrs.evolve(self.site.snapshot,
                                               problems=tuple(str(p) for p in problems)))
        except Exception:
            logs.emit("cannot take the status page's values", level=logging.ERROR,
                      exc_info=True, event="error")

    def close(self) -> None:
        """The daemon stops: open pages' streams end (so the router closes at once), then
        the page's own server."""
        if self.site is not None:
            self.site.end_streams()
        self._close_server()

    def _close_server(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def _start(self, config):
        from reconciler.report.statusserver import StatusServer

        try:
            key = _read_key(config.api_key_file)
            server = StatusServer(config.host, config.port, self.site, key=key)
            server.start()
        except (OSError, ValueError) as exc:
            logs.emit(f"cannot serve the status page on {config.listen}: {exc}; it starts when "
                      "its configuration changes", level=logging.ERROR, event="error")
            return None
        host, port = server.address
        logs.emit(f"status page on http://{'[' + host + ']' if ':' in host else host}:{port}/",
                  event="status_page", status_addr=f"{host}:{port}")
        return server


def _read_key(path: str | None) -> str | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        key = f.read().strip()
    if not key:
        raise ValueError(f"api_key_file {path} is empty")
    return key

