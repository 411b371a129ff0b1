"""``reconcile watch``: converge continuously, holding the lock for the daemon's life (SHELL).

The loop itself is ``reconciler.watch.Daemon``; this command sets up logging,
checks ``--metrics-addr`` (loopback only) before anything else, takes the
lock, starts the ``/metrics`` server and runs the daemon until SIGTERM or
SIGINT (exit 0). Those signals are held (blocked) from the start until the
daemon's handlers are installed, so one that comes early is acted on, not
fatal (SIGHUP) or lost.
"""

from __future__ import annotations

import logging
import sys

from reconciler.core.exitcodes import Exit
from reconciler.commands import common


def run(args) -> int:
    from reconciler.daemon import watch

    # SIGHUP/SIGTERM/SIGINT wait from here until the daemon's handlers are in:
    # `reconcile start` signals us as soon as the lock file names our pid.
    with watch.signals_held():
        return _run(args)


def _run(args) -> int:
    from reconciler.report import logs, metrics

    logs.setup(getattr(args, "log_format", "text") or "text")
    addr = getattr(args, "metrics_addr", None)
    if addr:
        try:
            metrics.parse_addr(addr)
        except ValueError as exc:
            print(f"reconcile: error: {exc}", file=sys.stderr)
            return Exit.ERROR
    if args.resync is not None and args.resync <= 0:
        print("reconcile: error: --resync must be positive", file=sys.stderr)
        return Exit.ERROR

    with common.holding(args) as (lock, store):
        published = server = None
        metrics_file = getattr(args, "metrics_file", None)
        if addr or metrics_file:
            published = metrics.DaemonMetrics(file=metrics_file)
        if addr:
            try:
                server = metrics.MetricsServer(addr, published.registry)
            except OSError as exc:
                print(f"reconcile: error: cannot serve metrics on {addr}: "
                      f"{exc.strerror or exc}", file=sys.stderr)
                return Exit.ERROR
        try:
            return _run_daemon(args, store, published, server, lock)
        finally:
            if server is not None:
                server.close()


def _router_factory(published, site=None):
    """§9 how the daemon makes its router; aiohttp is imported only when a node has one."""
    metrics = None

    def make(config, wake):
        nonlocal metrics
        from reconciler.router.service import Router

        if published is not None and metrics is None:
            from reconciler.report.metrics import RouterMetrics

            metrics = RouterMetrics(published.registry)
        return Router(config, wake=wake, metrics=metrics, status=site)

    return make


def _run_daemon(args, store, published, server, lock=None) -> int:
    from reconciler.report import logs
    from reconciler.daemon.watch import Daemon
    from reconciler.report.statussite import Site

    site = Site()  # §11 the status page, on the router's port and status_page.listen
    paths = common.manifest_paths(args)
    state_dir = common.state_dir(args)
    daemon = Daemon(
        paths=paths, store=store, state_dir=state_dir, resync=args.resync,
        allow_empty=bool(getattr(args, "allow_empty", False)),
        stop_on_exit=bool(getattr(args, "stop_on_exit", False)),
        metrics=published, node=common.node_choice(args),
        router_factory=_router_factory(published, site),
        lock_check=lock.check if lock is not None else None, status_site=site,
    )
    where = ""
    if server is not None:
        host, port = server.address
        shown = f"[{host}]" if ":" in host else host
        where = f", metrics on http://{shown}:{port}/metrics"
    logs.emit(f"watch started: manifests {', '.join(paths)}, state {state_dir}, "
              f"resync {args.resync:g}s{where}", event="start",
              metrics_addr=f"{server.address[0]}:{server.address[1]}" if server else None)
    try:
        return daemon.run()
    except Exception:
        logs.emit("the daemon failed", level=logging.ERROR, exc_info=True, event="error")
        return Exit.ERROR
