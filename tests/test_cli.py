"""The command line: each command's options are there when that command is parsed or helped."""

from __future__ import annotations

import pytest

from reconciler import cli
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
    for name, help_text, _, _ in cli._COMMANDS:
        assert name in out and help_text.split(":")[0][:40] in out


def test_options_of_the_command_and_globals_parse_on_either_side():
    """Global options go before or after the command; the command's own options parse."""
    args = cli.build_parser().parse_args(
        ["--state-dir", "/s", "watch", "--resync", "5", "-f", "/m", "--stop-on-exit"])
    assert (args.command, args.resync, args.manifests, args.state_dir, args.stop_on_exit,
            args.target) == ("watch", 5.0, "/m", "/s", True, "watch:run")
    args = cli.build_parser().parse_args(["models", "verify", "a", "b", "--full"])
    assert (args.names, args.full, args.target) == (["a", "b"], True, "models:run_verify")


def test_an_unknown_option_is_a_usage_error_exit_1(capsys):
    """A usage error exits 1 (2 means 'changes' for plan), naming the bad option."""
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["plan", "--bogus"])
    assert done.value.code == Exit.ERROR
    err = capsys.readouterr().err
    assert err.startswith("usage: reconcile ") and "unrecognized arguments: --bogus" in err


def test_no_command_prints_the_help_and_exits_1(capsys):
    """`reconcile` alone shows what it can do and is not a success."""
    assert cli.main([]) == Exit.ERROR
    assert "Typical use:" in capsys.readouterr().out
