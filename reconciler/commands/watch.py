"""``reconcile watch``: converge continuously, holding the lock for the daemon's life (SHELL).

The loop itself is ``reconciler.daemon.watch.Daemon``; this command sets up
logging, checks ``--metrics-addr`` (loopback only) before anything else, takes
the lock, starts the ``/metrics`` server and runs the daemon until SIGTERM or
SIGINT (exit 0). Those signals are held (blocked) from the start until the
daemon's handlers are installed, so one that comes early is acted on, not
fatal (SIGHUP) or lost.
"""

from __future__ import annotations

import logging
import sys

import attrs

from reconciler.commands import common
from reconciler.commands.options import GlobalOptions
from reconciler.core.exitcodes import Exit
from reconciler.daemon import watch
from reconciler.report import logs, metrics
from reconciler.report.statussite import Site


@attrs.frozen(kw_only=True)
class WatchOptions:
    resync: float = 30.0
    metrics_addr: str | None = None
    metrics_file: str | None = None
    stop_on_exit: bool = False
    allow_empty: bool = False


def run(g: GlobalOptions, o: WatchOptions) -> int:
    # SIGHUP/SIGTERM/SIGINT wait from here until the daemon's handlers are in:
    # `reconcile start` signals us as soon as the lock file names our pid.
    with watch.signals_held():
        return _run(g, o)


def _run(g: GlobalOptions, o: WatchOptions) -> int:
    logs.setup(g.log_format or "text")
    if o.metrics_addr:
        try:
            metrics.parse_addr(o.metrics_addr)
        except ValueError as exc:
            print(f"reconcile: error: {exc}", file=sys.stderr)
            return Exit.ERROR
    if o.resync is not None and o.resync <= 0:
        print("reconcile: error: --resync must be positive", file=sys.stderr)
        return Exit.ERROR

    with common.holding(g) as (lock, store):
        published = server = None
        if o.metrics_addr or o.metrics_file:
            published = metrics.DaemonMetrics(file=o.metrics_file)
        if o.metrics_addr:
            try:
                server = metrics.MetricsServer(o.metrics_addr, published.registry)
            except OSError as exc:
                print(f"reconcile: error: cannot serve metrics on {o.metrics_addr}: "
                      f"{exc.strerror or exc}", file=sys.stderr)
                return Exit.ERROR
        try:
            return _run_daemon(g, o, store, published, server, lock)
        finally:
            if server is not None:
                server.close()


def _router_factory(published, site=None):
    """§9 how the daemon makes its router; aiohttp is imported only when a node has one."""
    router_metrics = None

    def make(config, wake):
        nonlocal router_metrics
        from reconciler.router.service import Router

        if published is not None and router_metrics is None:
            router_metrics = metrics.RouterMetrics(published.registry)
        return Router(config, wake=wake, metrics=router_metrics, status=site)

    return make


def _run_daemon(g: GlobalOptions, o: WatchOptions, store, published, server, lock=None) -> int:
    site = Site()  # §11 the status page, on the router's port and status_page.listen
    inputs = common.pass_inputs(g, store, allow_empty=o.allow_empty)
    daemon = watch.Daemon(
        inputs, resync=o.resync, stop_on_exit=o.stop_on_exit, metrics=published,
        router_factory=_router_factory(published, site), status_site=site,
        lock_check=lock.check if lock is not None else None,
    )
    where = ""
    if server is not None:
        host, port = server.address
        shown = f"[{host}]" if ":" in host else host
        where = f", metrics on http://{shown}:{port}/metrics"
    logs.emit(f"watch started: manifests {', '.join(inputs.paths)}, state {inputs.state_dir}, "
              f"resync {o.resync:g}s{where}", event="start",
              metrics_addr=f"{server.address[0]}:{server.address[1]}" if server else None)
    try:
        return daemon.run()
    except Exception:
        logs.emit("the daemon failed", level=logging.ERROR, exc_info=True, event="error")
        return Exit.ERROR
