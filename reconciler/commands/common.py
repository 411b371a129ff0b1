"""What every command shares: the state dir, the store, the lock, problem output (SHELL).

Each takes the command line's ``GlobalOptions``; ``pass_inputs`` is the one
place a ``loop.PassInputs`` is made from them (the daemon evolves its copy).
The options of a command that two modules run are here too.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
from typing import Callable, Iterator

import attrs

from reconciler.commands.options import GlobalOptions
from reconciler.core.errors import shown, shown_json
from reconciler.core.exitcodes import Exit
from reconciler.manifests.fleet import NodeChoice
from reconciler.state.lock import Lock
from reconciler.state.store import Store, default_state_dir


@attrs.frozen(kw_only=True)
class PlanOptions:
    """``plan``: run by ``apply.run_plan``, or ``fleet.run_offline_plan`` with ``--offline``."""

    json: bool = False
    detailed_exitcode: bool = False
    allow_empty: bool = False
    offline: bool = False


@attrs.frozen(kw_only=True)
class StartOptions:
    """``start``: run by ``apply.run_start``, or ``handoff`` while a daemon holds the lock."""

    name: str
    json: bool = False


def state_dir(g: GlobalOptions) -> str:
    return g.state_dir or default_state_dir()


def manifest_paths(g: GlobalOptions) -> list[str]:
    return [g.manifests or "manifests"]


def node_choice(g: GlobalOptions) -> NodeChoice:
    """Which node this is (BEHAVIOUR §10): ``--node``, else ``$RECONCILER_NODE``, else the host name."""
    given = g.node or os.environ.get("RECONCILER_NODE", "")
    if given:
        return NodeChoice(name=given, explicit=True)
    return NodeChoice(name=socket.gethostname(), explicit=False)


def pass_inputs(g: GlobalOptions, store, **changes):
    """What a pass of this command starts from (``loop.PassInputs``), built here only."""
    # The pass itself (the probe stack, psutil): paid only by the commands that run one.
    from reconciler.engine.loop import PassInputs

    return PassInputs(paths=manifest_paths(g), store=store, state_dir=state_dir(g),
                      node=node_choice(g), **changes)


@contextlib.contextmanager
def open_store(g: GlobalOptions) -> Iterator:
    store = Store(state_dir(g))
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def locked(g: GlobalOptions) -> Iterator:
    """The lock for a whole pass, then the store (``errors.LockHeld`` when another holds it)."""
    with holding(g) as (_, store):
        yield store


@contextlib.contextmanager
def holding(g: GlobalOptions) -> Iterator:
    """``(lock, store)``: ``locked``, for a holder that checks its lock each pass (watch)."""
    lock = Lock(state_dir(g))
    lock.acquire(timeout=g.lock_timeout or 0.0)
    try:
        with open_store(g) as store:
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


def print_json(value, **dumps) -> None:
    """``value`` as JSON on stdout; DEL and C1 in its strings escaped (§1.5), as JSON does C0."""
    print(shown_json(json.dumps(value, **{"indent": 2, **dumps})))


def print_text(text: str) -> None:
    """A rendered text on stdout, its control characters escaped (§1.5: text from a manifest
    never reaches a terminal raw), without its last line break."""
    print(shown(text.rstrip("\n")))


def emit_document(build: Callable[[], str], output: str | None) -> int:
    """``models add`` / ``programs add``: the document ``build`` makes, to ``output``
    (replaced atomically) or stdout; an ``OSError`` or ``ValueError`` on the way is one
    line on stderr and exit 1, nothing written."""
    try:
        text = build()
        if output:
            _write_atomic(output, text)
            print(f"wrote {output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"reconcile: error: {where}{e.strerror or e}", file=sys.stderr)
        return Exit.ERROR
    except ValueError as e:
        print(f"reconcile: error: {e}", file=sys.stderr)
        return Exit.ERROR
    return Exit.OK


def _write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"cannot write {path}: {directory} is not a directory")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".document-", suffix=".yaml")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
