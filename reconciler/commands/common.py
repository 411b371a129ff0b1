"""What every command shares: the state dir, the store, the lock, problem output (SHELL)."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Iterator

from reconciler.core.exitcodes import Exit


def state_dir(args) -> str:
    from reconciler.state.store import default_state_dir

    return getattr(args, "state_dir", None) or default_state_dir()


def manifest_paths(args) -> list[str]:
    return [getattr(args, "manifests", None) or "manifests"]


def node_choice(args):
    """Which node this is (BEHAVIOUR §10): ``--node``, else ``$RECONCILER_NODE``, else the host name."""
    import os
    import socket

    from reconciler.manifests.fleet import NodeChoice

    given = getattr(args, "node", None) or os.environ.get("RECONCILER_NODE", "")
    if given:
        return NodeChoice(name=given, explicit=True)
    return NodeChoice(name=socket.gethostname(), explicit=False)


@contextlib.contextmanager
def open_store(args) -> Iterator:
    from reconciler.state.store import Store

    store = Store(state_dir(args))
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def locked(args) -> Iterator:
    """The lock for a whole pass, then the store (``errors.LockHeld`` when another holds it)."""
    with holding(args) as (_, store):
        yield store


@contextlib.contextmanager
def holding(args) -> Iterator:
    """``(lock, store)``: ``locked``, for a holder that checks its lock each pass (watch)."""
    from reconciler.state.lock import Lock

    lock = Lock(state_dir(args))
    lock.acquire(timeout=getattr(args, "lock_timeout", 0.0) or 0.0)
    try:
        with open_store(args) as store:
            yield lock, store
    finally:
        lock.release()


def report_problems(problems) -> int:
    """Every manifest problem, one per line, on stderr; nothing was done."""
    for problem in problems:
        print(str(problem), file=sys.stderr)
    print(f"reconcile: {len(problems)} manifest problem(s); nothing was changed",
          file=sys.stderr)
    return Exit.ERROR


def report_warnings(warnings) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))
