"""The ``reconcile`` command line (SHELL): argparse, dispatch, exit codes.

Each command's work lives in ``reconciler/commands/<module>.py`` as
``run(args) -> int`` and is imported only when that command runs, so that
``reconcile validate`` never pays for the probe stack or psutil.

Exit codes (``exitcodes.py``), for every command: 0 ok, 1 error (including bad usage and
invalid manifests), 2 ``plan --detailed-exitcode`` with changes, 3 a role
needs an operator (gave-up, stopped-exposed, unplaceable, refused).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from typing import Callable, Sequence

from reconciler.core.desired import Runtime
from reconciler.core.errors import ReconcilerError
from reconciler.core.exitcodes import Exit

_TOP_HELP = """\
Make this machine's local LLM inference servers match YAML manifests.

Typical use:
  reconcile validate manifests/          check manifests (CI of your manifests repo)
  reconcile plan                         show what would change, and why
  reconcile --once                       converge once (cron)
  reconcile watch                        converge continuously
  reconcile status                       what every role is doing
  reconcile fleet --diff HEAD~1          what a commit changes on which node
"""


_EPILOG = """\
exit codes: 0 ok; 1 error (bad usage, invalid manifests: nothing is changed, a failed
action); 2 'plan --detailed-exitcode' with changes; 3 a role needs an operator
(gave-up, stopped-exposed, unplaceable, refused).
'reconcile COMMAND --help' describes each command."""


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 1 like every other error (2 means "changes" for plan).

    A command's parser is filled in (``build``) only when that command is
    parsed or its help is shown: one run pays for its own command's options,
    not for all of them.
    """

    def __init__(self, *args, build: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self._build = build

    def _built(self) -> None:
        if self._build is not None:
            build, self._build = self._build, None
            build(self)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._built()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._built()
        return super().format_help()

    def format_usage(self) -> str:
        self._built()
        return super().format_usage()

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(Exit.ERROR, f"{self.prog}: error: {message}\n")


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized like it (``$COLUMNS``, else the terminal) without shutil.

    argparse makes a formatter for every argument it adds; its own asks
    ``shutil`` for the width, an import no run needs otherwise.
    """

    def __init__(self, prog: str, **kwargs) -> None:
        if kwargs.get("width") is None:
            kwargs["width"] = _columns() - 2
        super().__init__(prog, **kwargs)


class _RawFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    pass


def _columns() -> int:
    """What ``shutil.get_terminal_size().columns`` says, with its fallback of 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _seconds(text: str) -> float:
    """A finite, non-negative number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite, non-negative number")
    return value


def _node_name(text: str) -> str:
    from reconciler.core.units import is_plain_token

    if not is_plain_token(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a node name: 1-64 letters, digits or . _ + : - (no '..')")
    return text


def _path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _add_globals(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Global options, accepted before or after the command name."""
    default = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    g = parser.add_argument_group("global options")
    g.add_argument(
        "-f", "--manifests", metavar="DIR", type=_path, default=default("manifests"),
        help="directory (or file) of manifests (default: ./manifests)",
    )
    g.add_argument(
        "--state-dir", metavar="DIR", type=_path, default=default(None),
        help="state directory (default: $RECONCILER_STATE_DIR, else /var/lib/reconciler as "
        "root, else $XDG_STATE_HOME/reconciler)",
    )
    g.add_argument(
        "--log-format", choices=("text", "json"), default=default("text"),
        help="log line format on stderr (default: text)",
    )
    g.add_argument(
        "--lock-timeout", metavar="SECONDS", type=_seconds, default=default(0.0),
        help="wait this long for another reconciler's lock, then exit 1 (default: 0)",
    )
    g.add_argument(
        "--node", metavar="NAME", type=_node_name, default=default(None),
        help="which node of the manifests this is (default: $RECONCILER_NODE, else the host "
        "name; a set with one NodeConfig and no name given: that one)",
    )


def _add_apply_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the plan and outcomes as JSON")
    p.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
    p.add_argument(
        "--allow-empty", action="store_true",
        help="allow an empty manifest set to stop running managed servers",
    )
    p.add_argument(
        "--metrics-file", metavar="PATH",
        help="write Prometheus metrics here after the pass (atomic replace)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reconcile", description=_TOP_HELP, epilog=_EPILOG, formatter_class=_RawFormatter,
    )
    parser.add_argument(
        "--once", action="store_true",
        help="converge once and exit (the same as 'reconcile apply')",
    )
    parser.add_argument("--version", action="version", version=_version())
    _add_globals(parser, suppress=False)
    _add_apply_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text, target, build in _COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text, build=build)
        p.set_defaults(target=target)
    return parser


def _globals_then(build: Callable[[argparse.ArgumentParser], None]):
    def both(p: argparse.ArgumentParser) -> None:
        _add_globals(p, suppress=True)
        build(p)
    return both


def _validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="files or directories (default: the -f directory)")
    p.add_argument("--json", action="store_true", help="print problems as a JSON list")


def _plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--detailed-exitcode", action="store_true",
                   help="exit 0 with no changes, 2 with changes, 1 on error (plan never "
                   "exits 3: roles needing an operator are counted in its summary)")
    p.add_argument("--allow-empty", action="store_true",
                   help="plan stops even when the manifest set is empty")
    p.add_argument("--offline", action="store_true",
                   help="from the manifests alone (no probe, no state): what this node (--node) "
                   "would run on an empty machine")


def _fleet(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Every node's offline plan: the roles placed on it, their ports, and its memory "
        "against its budget, from the manifests alone. With --diff REV, what the checkout "
        "changes on which node relative to git revision REV (nothing is checked out); exit 0 "
        "no changes, 2 changes, 1 error.")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--diff", metavar="REV",
                   help="show the node and role changes since git revision REV (e.g. HEAD~1)")


def _watch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resync", metavar="SECONDS", type=_seconds, default=30.0,
                   help="reconcile at least this often (default: 30)")
    p.add_argument("--metrics-addr", metavar="HOST:PORT",
                   help="serve Prometheus /metrics here (loopback only)")
    p.add_argument("--metrics-file", metavar="PATH", help="also write metrics to this file")
    p.add_argument("--stop-on-exit", action="store_true",
                   help="stop managed servers when the daemon exits")
    p.add_argument("--allow-empty", action="store_true",
                   help="allow an empty manifest set to stop running managed servers")


def _status(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="one role")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--html", metavar="FILE",
                   help="also write the status page (§11) to FILE, once (for a node without "
                        "a daemon)")


def _start(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Clear the role's gave-up / stopped-exposed state, reset its restarts to 0 and run a "
        "whole pass now (so every other role converges too). While 'reconcile watch' holds "
        "the lock, the start is handed to that daemon (queued in the state store, then "
        "SIGHUP) and this waits for its pass, 30 s or --lock-timeout if longer. Exit 0 "
        "done; 1 not taken in time (it stays queued for the next pass) or a failed action; "
        "3 a role still needs an operator.")
    p.add_argument("name", help="the role")
    p.add_argument("--json", action="store_true", help="print the plan and outcomes as JSON")


def _logs(p: argparse.ArgumentParser) -> None:
    p.description = (
        "A managed server's own log, <data_root>/<instance id>/server.log (and its rotated "
        "server.log.1 .. .3 when -n reaches into them). --follow prints what is appended, "
        "like tail -F: across the log's rotation, the server's restarts and a new instance "
        "directory after a port or model edit. Exit 1 when the role is unknown, adopted, "
        "or has no log on this node.")
    p.add_argument("name", help="the role")
    p.add_argument("-n", "--lines", metavar="N", type=int, default=20,
                   help="how many of the last lines to print (default: 20)")
    p.add_argument("-F", "--follow", action="store_true",
                   help="then keep printing what is appended (Ctrl-C ends it)")


def _health(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the role")
    p.add_argument("--deep", action="store_true", help="ask the server for one token")
    p.add_argument("--json", action="store_true", help="print as JSON")


def _json_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")


def _capabilities(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--devices-yaml", action="store_true",
                   help="print a NodeConfig devices: snippet for the devices found (§7.1)")


def _events(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="one role")
    p.add_argument("--since", metavar="DURATION", help="only events newer than this (e.g. 1h)")
    p.add_argument("--json", action="store_true", help="print as JSON lines")


def _models(models: argparse.ArgumentParser) -> None:
    msub = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND", required=True,
                                 parser_class=_Parser)
    p = msub.add_parser("add", help="hash a model in place and print its Model document",
                        build=_globals_then(_models_add))
    p.set_defaults(target="models:run_add")
    p = msub.add_parser("verify", help="verify models against their manifests",
                        build=_globals_then(_models_verify))
    p.set_defaults(target="models:run_verify")
    p = msub.add_parser("fetch", help="fetch this node's Models that have a source, with a "
                        "progress bar", build=_globals_then(_models_fetch))
    p.set_defaults(target="modelfetch:run_fetch")


def _models_add(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="a GGUF file or a model directory")
    p.add_argument("--name", help="the Model name (default: from the path)")
    p.add_argument("--format", choices=("gguf", "mlx", "safetensors", "ollama"),
                   help="the model format (default: detected)")
    p.add_argument("--ollama", metavar="NAME:TAG",
                   help="describe an Ollama model from Ollama's own store")
    p.add_argument("-o", "--output", metavar="FILE", help="write the document here")
    p.add_argument("--url", metavar="URL", help="describe a file at an https URL (its "
                   "metadata only; nothing is downloaded)")
    p.add_argument("--sha256", metavar="HEX", help="with --url: the file's digest")
    p.add_argument("--hf-endpoint", metavar="URL", help="the Hub for hf:// (default "
                   "$HF_ENDPOINT or https://huggingface.co)")
    p.add_argument("--hf-token-file", metavar="FILE", help="a file holding a Hub token")


def _models_fetch(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--retry", action="store_true",
                   help="forget a failed fetch (a digest mismatch) and try again")


def _models_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--full", action="store_true", help="re-hash every byte")
    p.add_argument("--json", action="store_true", help="print as JSON")


def _import(imp: argparse.ArgumentParser) -> None:
    isub = imp.add_subparsers(dest="import_kind", metavar="FROM", required=True,
                              parser_class=_Parser)
    p = isub.add_parser("cmd", help="a server command line: reconcile import cmd -- llama-server …",
                        build=_globals_then(_import_cmd))
    p.set_defaults(target="importer:run_import")
    p = isub.add_parser("llama-swap", help="a llama-swap config.yaml",
                        build=_globals_then(_import_swap))
    p.set_defaults(target="importer:run_import")


def _import_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write the manifests into this directory (default: .); only new files")


def _import_cmd(p: argparse.ArgumentParser) -> None:
    _import_common(p)
    p.add_argument("--name", help="the role's name (default: from the model file)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND…",
                   help="[ENV=VALUE…] llama-server|mlx_lm.server ARGS…, after --")


def _import_swap(p: argparse.ArgumentParser) -> None:
    _import_common(p)
    p.add_argument("config", metavar="CONFIG.yaml")
    p.add_argument("--listen", type=int, default=8080, metavar="PORT",
                   help="llama-swap's --listen port: the router listens there (default 8080)")


#: Every command: name, one line of help, ``module:function`` it runs, how its options are made.
_COMMANDS: tuple[tuple[str, str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("validate", "check manifests and report every problem as FILE:LINE: $.path: message",
     "validate:run", _globals_then(_validate)),
    ("plan", "show what a pass would do, one line per role with its reason",
     "apply:run_plan", _globals_then(_plan)),
    ("fleet", "every node's offline plan; --diff REV: what changes on which node",
     "fleet:run", _globals_then(_fleet)),
    ("apply", "converge once: observe, plan, act, record (same as --once)",
     "apply:run_apply", _globals_then(_add_apply_options)),
    ("watch", "converge continuously: on manifest edits, server exits and a timer",
     "watch:run", _globals_then(_watch)),
    ("status", "what every role is doing now", "status:run_status", _globals_then(_status)),
    ("start", "clear gave-up / stopped-exposed, reset restarts, run a whole pass now",
     "apply:run_start", _globals_then(_start)),
    ("health", "probe one role and report (with --deep, ask for one token)",
     "health:run_health", _globals_then(_health)),
    ("capabilities", f"what this node can run ({', '.join(Runtime)}), and why not",
     "health:run_capabilities", _globals_then(_capabilities)),
    ("events", "the event log", "status:run_events", _globals_then(_events)),
    ("logs", "a managed server's own log (server.log); --follow like tail -F",
     "serverlogs:run", _globals_then(_logs)),
    ("models", "write and verify Model manifests", "", _globals_then(_models)),
    ("import", "write manifests from a llama-swap config or a server command line",
     "", _globals_then(_import)),
)


def _version() -> str:
    from reconciler import __version__

    return f"reconcile {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if not args.once:
            parser.print_help()
            return Exit.ERROR
        args.target = "apply:run_apply"
    module_name, func_name = args.target.split(":")
    module = importlib.import_module(f"reconciler.commands.{module_name}")
    try:
        return int(getattr(module, func_name)(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `reconcile events | head`: the reader had enough; not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except ReconcilerError as exc:
        # The exception tree of errors.py: an unusable state directory or store,
        # the lock held by another reconciler. One line, no traceback.
        print(f"reconcile: error: {exc}", file=sys.stderr)
        return Exit.ERROR
    except OSError as exc:
        # An unreadable path, an unwritable metrics file: a message, not a traceback.
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        print(f"reconcile: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return Exit.ERROR
