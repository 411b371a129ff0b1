"""The command line: each command's options are there when that command is parsed or helped."""

from __future__ import annotations

import pytest

from reconciler import cli
from reconciler.commands import options as opt
from reconciler.commands.apply import ApplyOptions
from reconciler.commands.common import PlanOptions, StartOptions
from reconciler.commands.models import ModelsVerifyOptions
from reconciler.commands.options import GlobalOptions
from reconciler.commands.watch import WatchOptions
from reconciler.core.exitcodes import Exit

#: A command and an option only it has (built when that command is used).
OWN_OPTION = [
    (["validate"], "--json"), (["plan"], "--detailed-exitcode"), (["apply"], "--dry-run"),
    (["watch"], "--stop-on-exit"), (["status"], "--json"), (["start"], "--json"),
    (["health"], "--deep"), (["capabilities"], "--json"), (["events"], "--since"),
    (["models", "add"], "--ollama"), (["models", "verify"], "--full"),
]


@pytest.mark.parametrize("words,option", OWN_OPTION,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_every_command_helps_with_its_own_and_the_global_options(words, option, capsys):
    """`reconcile CMD --help` lists the command's options and the global ones, exit 0."""
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args([*words, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: reconcile {' '.join(words)} ")
    assert option in out and "--state-dir" in out and "--lock-timeout" in out


def test_the_top_help_lists_every_command(capsys):
    """`reconcile --help` names every command with its one line of help."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for row in cli.COMMANDS:
        assert row.name in out and row.help.split(":")[0][:40] in out


def test_options_of_the_command_and_globals_parse_on_either_side():
    """Global options go before or after the command; the command's own options parse."""
    got = cli.parse(["--state-dir", "/s", "watch", "--resync", "5", "-f", "/m", "--stop-on-exit"])
    assert got.command.name == "watch"
    assert got.globals == GlobalOptions(manifests="/m", state_dir="/s")
    assert opt.of(WatchOptions, got.values) == WatchOptions(resync=5.0, stop_on_exit=True)
    got = cli.parse(["models", "verify", "a", "b", "--full"])
    assert got.command.name == "verify"
    assert opt.of(ModelsVerifyOptions, got.values) == ModelsVerifyOptions(names=("a", "b"),
                                                                         full=True)


def test_a_global_option_before_the_command_is_kept_when_not_repeated_after():
    """`--node n plan`: the command's parser leaves the global given before it alone."""
    got = cli.parse(["--node", "n1", "--lock-timeout", "3", "plan", "--json"])
    assert got.globals == GlobalOptions(node="n1", lock_timeout=3.0)
    assert opt.of(PlanOptions, got.values) == PlanOptions(json=True)
    assert cli.parse(["plan", "--node", "n2"]).globals.node == "n2"


def test_once_is_apply_with_the_top_level_apply_options():
    """`reconcile --once --dry-run` runs apply with the options given before any command."""
    got = cli.parse(["--once", "--dry-run", "--json"])
    assert got.command is cli.ONCE and got.command.name == "apply"
    assert opt.of(ApplyOptions, got.values) == ApplyOptions(dry_run=True, json=True)
    assert cli.parse([]) is None


#: Each command's words (a minimal valid command line) and the options class its runner makes.
def _every_command():
    from reconciler.commands import (
        apply, capabilities, events, fleet, health, importer, modelfetch, models, programs,
        serverlogs, status, validate, watch,
    )

    return [
        (["validate"], validate.ValidateOptions), (["plan"], PlanOptions),
        (["fleet"], fleet.FleetOptions), (["apply"], apply.ApplyOptions),
        (["watch"], watch.WatchOptions), (["status"], status.StatusOptions),
        (["start", "r"], StartOptions), (["health", "r"], health.HealthOptions),
        (["capabilities"], capabilities.CapabilitiesOptions), (["events"], events.EventsOptions),
        (["logs", "r"], serverlogs.LogsOptions), (["models", "add"], models.ModelsAddOptions),
        (["models", "verify"], models.ModelsVerifyOptions),
        (["models", "fetch"], modelfetch.ModelsFetchOptions),
        (["import", "cmd"], importer.ImportCmdOptions),
        (["import", "llama-swap", "c.yaml"], importer.ImportSwapOptions),
        (["programs", "add", "/x"], programs.ProgramsAddOptions),
    ]


def test_every_command_s_flags_fill_its_frozen_options_exactly():
    """Every field of a command's options class is one of its flags, and the value is frozen."""
    import attrs

    rows = [*cli.COMMANDS, *(s for row in cli.COMMANDS for s in row.subcommands)]
    assert len(_every_command()) == sum(1 for row in rows if row.run is not None)
    for words, cls in _every_command():
        got = cli.parse(words)
        assert got.command.name in words
        fields = {f.name for f in attrs.fields(cls)}
        assert fields <= set(got.values), (words, fields - set(got.values))
        value = opt.of(cls, got.values)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, sorted(fields)[0], None)
