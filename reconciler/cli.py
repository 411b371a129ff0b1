"""The ``reconcile`` command line (SHELL): argparse, the command table, dispatch, exit codes.

The command line is parsed once into two frozen values (``commands/options.py``):
the ``GlobalOptions`` and the command's own options. ``COMMANDS`` is the
command table: each command's name, help, flags and the function that runs
it. Those functions are the one place that imports a command's module
(``reconciler/commands/<module>.py``), when that command runs, and make its
options value from the parsed flags, so ``reconcile validate`` never pays
for the probe stack or psutil and a plain ``--once`` only for its pass.

A new command is: its flags (``<command>_flags(parser)``) in
``commands/options.py``; its frozen options class and ``run(g: GlobalOptions,
o: ItsOptions) -> int`` in its module under ``commands/``; here, one runner
that imports that module and one ``Command`` row (a subcommand goes in its
group's ``subcommands``).

Exit codes (``exitcodes.py``), for every command: 0 ok, 1 error (including bad usage and
invalid manifests), 2 ``plan --detailed-exitcode`` with changes, 3 a role
needs an operator (gave-up, stopped-exposed, unplaceable, refused).

Size: the command table (each command's runner, the one lazy import of its
module) and argparse's lazy-building, exit-1 help machinery; the flags
themselves are in ``commands/options.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any, Callable, Mapping, Sequence

import attrs

from reconciler import __version__
from reconciler.commands import options as opt
from reconciler.commands.options import GlobalOptions
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



# ---------------------------------------------------------------- the command table
# Each runner imports its command's module when that command runs (the only
# function-local imports of the command line) and makes its options value there.

Values = Mapping[str, Any]  # the parsed command line, ``vars(namespace)``


def _validate(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import validate

    return validate.run(g, opt.of(validate.ValidateOptions, values))


def _plan(g: GlobalOptions, values: Values) -> int:
    if values["offline"]:  # from the manifests alone: no probe stack, no store
        from reconciler.commands import fleet

        return fleet.run_offline_plan(g, opt.of(fleet.PlanOptions, values))
    from reconciler.commands import apply

    return apply.run_plan(g, opt.of(apply.PlanOptions, values))


def _fleet(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import fleet

    return fleet.run(g, opt.of(fleet.FleetOptions, values))


def _apply(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import apply

    return apply.run_apply(g, opt.of(apply.ApplyOptions, values))


def _watch(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import watch

    return watch.run(g, opt.of(watch.WatchOptions, values))


def _status(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import status

    return status.run_status(g, opt.of(status.StatusOptions, values))


def _start(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import apply

    return apply.run_start(g, opt.of(apply.StartOptions, values))


def _health(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import health

    return health.run_health(g, opt.of(health.HealthOptions, values))


def _capabilities(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import capabilities

    return capabilities.run(g, opt.of(capabilities.CapabilitiesOptions, values))


def _events(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import events

    return events.run(g, opt.of(events.EventsOptions, values))


def _logs(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import serverlogs

    return serverlogs.run(g, opt.of(serverlogs.LogsOptions, values))


def _import_cmd(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import importer

    return importer.run_cmd(g, opt.of(importer.ImportCmdOptions, values))


def _import_swap(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import importer

    return importer.run_swap(g, opt.of(importer.ImportSwapOptions, values))


def _models_add(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import models

    return models.run_add(g, opt.of(models.ModelsAddOptions, values))


def _models_fetch(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import modelfetch

    return modelfetch.run_fetch(g, opt.of(modelfetch.ModelsFetchOptions, values))


def _models_verify(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import models

    return models.run_verify(g, opt.of(models.ModelsVerifyOptions, values))


def _programs_add(g: GlobalOptions, values: Values) -> int:
    from reconciler.commands import programs

    return programs.run_add(g, opt.of(programs.ProgramsAddOptions, values))


@attrs.frozen(kw_only=True)
class Command:
    """One row of the command table."""

    name: str
    help: str
    flags: Callable[[argparse.ArgumentParser], None]  # its own flags (``commands/options.py``)
    run: Callable[[GlobalOptions, Values], int] | None  # None: a group (``subcommands``)
    subcommands: tuple[Command, ...] = ()
    metavar: str = "SUBCOMMAND"  # a group's name for its subcommands in the usage line


COMMANDS: tuple[Command, ...] = (
    Command(name="validate", flags=opt.validate_flags, run=_validate,
            help="check manifests and report every problem as FILE:LINE: $.path: message"),
    Command(name="plan", flags=opt.plan_flags, run=_plan,
            help="show what a pass would do, one line per role with its reason"),
    Command(name="fleet", flags=opt.fleet_flags, run=_fleet,
            help="every node's offline plan; --diff REV: what changes on which node"),
    Command(name="apply", flags=opt.apply_flags, run=_apply,
            help="converge once: observe, plan, act, record (same as --once)"),
    Command(name="watch", flags=opt.watch_flags, run=_watch,
            help="converge continuously: on manifest edits, server exits and a timer"),
    Command(name="status", flags=opt.status_flags, run=_status,
            help="what every role is doing now"),
    Command(name="start", flags=opt.start_flags, run=_start,
            help="clear gave-up / stopped-exposed, reset restarts, run a whole pass now"),
    Command(name="health", flags=opt.health_flags, run=_health,
            help="probe one role and report (with --deep, ask for one token)"),
    Command(name="capabilities", flags=opt.capabilities_flags, run=_capabilities,
            help=f"what this node can run ({', '.join(Runtime)}), and why not"),
    Command(name="events", flags=opt.events_flags, run=_events, help="the event log"),
    Command(name="logs", flags=opt.logs_flags, run=_logs,
            help="a managed server's own log (server.log); --follow like tail -F"),
    Command(name="models", flags=opt.group_flags, run=None,
            help="write and verify Model manifests", subcommands=(
                Command(name="add", flags=opt.models_add_flags, run=_models_add,
                        help="hash a model in place and print its Model document"),
                Command(name="verify", flags=opt.models_verify_flags, run=_models_verify,
                        help="verify models against their manifests"),
                Command(name="fetch", flags=opt.models_fetch_flags, run=_models_fetch,
                        help="fetch this node's Models that have a source, with a progress bar"),
            )),
    Command(name="programs", flags=opt.group_flags, run=None,
            help="pin server programs by digest (§14)", subcommands=(
                Command(name="add", flags=opt.programs_add_flags, run=_programs_add,
                        help="hash a server binary and the libraries beside it in place and "
                             "print its Program document"),
            )),
    Command(name="import", flags=opt.group_flags, run=None, metavar="FROM",
            help="write manifests from a llama-swap config or a server command line",
            subcommands=(
                Command(name="cmd", flags=opt.import_cmd_flags, run=_import_cmd,
                        help="a server command line: reconcile import cmd -- llama-server …"),
                Command(name="llama-swap", flags=opt.import_swap_flags, run=_import_swap,
                        help="a llama-swap config.yaml"),
            )),
)

#: ``reconcile --once`` (no command): ``apply`` with the top level's apply options.
ONCE = COMMANDS[3]

#: Where the parsed namespace keeps the command that was named (a row of ``COMMANDS``).
_CHOSEN = "command_row"


# ---------------------------------------------------------------- parsing


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reconcile", description=_TOP_HELP, epilog=_EPILOG, formatter_class=_RawFormatter,
    )
    parser.add_argument(
        "--once", action="store_true",
        help="converge once and exit (the same as 'reconcile apply')",
    )
    parser.add_argument("--version", action="version", version=_version())
    GlobalOptions.arguments(parser, suppress=False)
    opt.apply_flags(parser)
    _add_commands(parser, COMMANDS, dest="command", metavar="COMMAND")
    return parser


def _add_commands(parser: argparse.ArgumentParser, rows: tuple[Command, ...], *,
                  dest: str, metavar: str) -> None:
    sub = parser.add_subparsers(dest=dest, metavar=metavar, required=dest != "command",
                                parser_class=_Parser)
    for row in rows:
        described = {"description": row.help} if dest == "command" else {}
        p = sub.add_parser(row.name, help=row.help, build=functools.partial(_build, row),
                           **described)
        p.set_defaults(**{_CHOSEN: row})


def _build(row: Command, p: argparse.ArgumentParser) -> None:
    """A command's parser, filled in when it is used: the global options, then its own."""
    GlobalOptions.arguments(p, suppress=True)
    row.flags(p)
    if row.subcommands:
        _add_commands(p, row.subcommands, dest=f"{row.name}_command", metavar=row.metavar)


@attrs.frozen(kw_only=True)
class Invocation:
    """The command line, parsed once: what to run, with which options."""

    command: Command
    globals: GlobalOptions
    values: Values  # the command's own options, made into its options value by its runner


def parse(argv: Sequence[str] | None = None,
          parser: argparse.ArgumentParser | None = None) -> Invocation | None:
    """The invocation, or None when no command was named and no ``--once`` given."""
    values = vars((parser or build_parser()).parse_args(argv))
    row = values.get(_CHOSEN)
    if row is None:
        if not values["once"]:
            return None
        row = ONCE
    return Invocation(command=row, globals=opt.of(GlobalOptions, values), values=values)


def _version() -> str:
    return f"reconcile {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    invocation = parse(argv, parser)
    if invocation is None:
        parser.print_help()
        return Exit.ERROR
    try:
        from reconciler.platform import choose

        choose.check()  # RECONCILER_PLATFORM: a wrong value is refused before anything runs
        return int(invocation.command.run(invocation.globals, invocation.values))
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
        where = f" {exc.filename}" if exc.filename else ""
        print(f"reconcile: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return Exit.ERROR
