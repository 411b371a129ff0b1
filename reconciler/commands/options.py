"""The command line's options: the global ones as a frozen value, every command's flags (SHELL).

``cli.py`` parses the command line once and turns it into two values: the
``GlobalOptions`` every command shares (accepted before or after the command
name) and the command's own options, a frozen class defined beside the
``run`` that takes it (``ApplyOptions`` in ``apply.py`` …; ``PlanOptions`` and
``StartOptions``, which two modules take, in ``common.py``). Defining an attrs class costs about
a millisecond, so a run defines only its own command's; the flags that fill
it are declared here (``<command>_flags(parser)``, run only when that
command is parsed), and argparse's ``dest`` of each flag is the field of the
same name. ``of(cls, values)`` builds the value from the parsed namespace's
``vars()``; nothing reads the namespace after that, and nothing changes an
options value: a command that runs another with other options makes a new
value.

Argument types that check a value (``seconds``, ``node_name``, ``path``)
live here with the flags that use them.

Size: one table of every command's flags, so the whole command line reads in one place
(each command's handler lives in its own module).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterable, Mapping, TypeVar

import attrs

from reconciler.core.units import is_plain_token

T = TypeVar("T")


def tuple_of(values: Iterable[T]) -> tuple[T, ...]:
    """An options field's converter to a tuple.

    Not ``converter=tuple``: for a builtin, attrs reads the signature from its
    text, which compiles ``tokenize``'s patterns, milliseconds of every run.
    """
    return tuple(values)


def of(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls`` from the parsed values (argparse's ``vars(namespace)``), its own fields only."""
    return cls(**{f.name: values[f.name] for f in attrs.fields(cls) if f.name in values})


# ---------------------------------------------------------------- argument types


def seconds(text: str) -> float:
    """A finite, non-negative number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite, non-negative number")
    return value


def node_name(text: str) -> str:
    if not is_plain_token(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a node name: 1-64 letters, digits or . _ + : - (no '..')")
    return text


def path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


# ---------------------------------------------------------------- global


@attrs.frozen(kw_only=True)
class GlobalOptions:
    """What every command is given: where the manifests and the state are, how to log."""

    manifests: str = "manifests"
    state_dir: str | None = None  # None: $RECONCILER_STATE_DIR, else the default (common.py)
    log_format: str = "text"
    lock_timeout: float = 0.0
    node: str | None = None  # None: $RECONCILER_NODE, else the host name (common.py)

    @staticmethod
    def arguments(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
        """Global options, accepted before or after the command name.

        After it (``suppress``) they have no default of their own, so one given
        before the command is not overwritten by the command's parser.
        """
        def default(value):
            return argparse.SUPPRESS if suppress else value

        g = parser.add_argument_group("global options")
        g.add_argument(
            "-f", "--manifests", metavar="DIR", type=path, default=default("manifests"),
            help="directory (or file) of manifests (default: ./manifests)",
        )
        g.add_argument(
            "--state-dir", metavar="DIR", type=path, default=default(None),
            help="state directory (default: $RECONCILER_STATE_DIR, else /var/lib/reconciler as "
            "root, else $XDG_STATE_HOME/reconciler)",
        )
        g.add_argument(
            "--log-format", choices=("text", "json"), default=default("text"),
            help="log line format on stderr (default: text)",
        )
        g.add_argument(
            "--lock-timeout", metavar="SECONDS", type=seconds, default=default(0.0),
            help="wait this long for another reconciler's lock, then exit 1 (default: 0)",
        )
        g.add_argument(
            "--node", metavar="NAME", type=node_name, default=default(None),
            help="which node of the manifests this is (default: $RECONCILER_NODE, else the host "
            "name; a set with one NodeConfig and no name given: that one)",
        )


def _json(p: argparse.ArgumentParser, help_text: str = "print as JSON") -> None:
    p.add_argument("--json", action="store_true", help=help_text)


def _allow_empty(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--allow-empty", action="store_true", help=help_text)


# ---------------------------------------------------------------- each command's flags


def validate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="files or directories (default: the -f directory)")
    _json(p, "print problems as a JSON list")
    p.epilog = ("A role's extra_args are judged by the flag table of its Program's build "
                "(llama-server b11434 or b10068; another version by the nearest older "
                "table, with a warning; a path by b11434's): BEHAVIOUR §1.4.")


def plan_flags(p: argparse.ArgumentParser) -> None:
    _json(p, "print the plan as JSON")
    p.add_argument("--detailed-exitcode", action="store_true",
                   help="exit 0 with no changes, 2 with changes, 1 on error (plan never "
                   "exits 3: roles needing an operator are counted in its summary)")
    _allow_empty(p, "plan stops even when the manifest set is empty")
    p.add_argument("--offline", action="store_true",
                   help="from the manifests alone (no probe, no state): what this node "
                   "(--node) would run on an empty machine")


def apply_flags(p: argparse.ArgumentParser) -> None:
    _json(p, "print the plan and outcomes as JSON")
    p.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
    _allow_empty(p, "allow an empty manifest set to stop running managed servers")
    p.add_argument("--metrics-file", metavar="PATH",
                   help="write Prometheus metrics here after the pass (atomic replace)")


def fleet_flags(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Every node's offline plan: the roles placed on it, their ports, and its memory "
        "against its budget, from the manifests alone. With --diff REV, what the checkout "
        "changes on which node relative to git revision REV (nothing is checked out); exit 0 "
        "no changes, 2 changes, 1 error. With --rollout, when each node takes the changes "
        "its Rollout stages (BEHAVIOUR §13).")
    _json(p)
    p.add_argument("--diff", metavar="REV",
                   help="show the node and role changes since git revision REV (e.g. HEAD~1); "
                        "a change a Rollout stages (spec, Model or Program) says "
                        "'staged: Rollout NAME' (§13)")
    p.add_argument("--rollout", action="store_true",
                   help="§13 each Rollout's waves and every node's turn: when it moves, whether "
                        "it has, what the gate says (offline: not asked, so later waves hold)")
    p.add_argument("--ask-gates", action="store_true",
                   help="with --rollout: ask each wave's gate (its Prometheus) about the "
                        "revision checked out, instead of showing it unasked")
    p.add_argument("--at", metavar="TIME",
                   help="with --rollout: the moment to show, an RFC 3339 time such as "
                        "2026-12-02T15:10:00Z (default: now)")


def watch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resync", metavar="SECONDS", type=seconds, default=30.0,
                   help="reconcile at least this often (default: 30)")
    p.add_argument("--metrics-addr", metavar="HOST:PORT",
                   help="serve Prometheus /metrics here (loopback only)")
    p.add_argument("--metrics-file", metavar="PATH", help="also write metrics to this file")
    p.add_argument("--stop-on-exit", action="store_true",
                   help="stop managed servers when the daemon exits")
    _allow_empty(p, "allow an empty manifest set to stop running managed servers")


def status_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="one role")
    _json(p)
    p.add_argument("--html", metavar="FILE",
                   help="also write the status page (§11) to FILE, once (for a node without "
                        "a daemon)")


def start_flags(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Clear the role's gave-up / stopped-exposed state, reset its restarts to 0 and run a "
        "whole pass now (so every other role converges too). While 'reconcile watch' holds "
        "the lock, the start is handed to that daemon (queued in the state store, then "
        "SIGHUP) and this waits for its pass, 30 s or --lock-timeout if longer. Exit 0 "
        "done; 1 not taken in time (it stays queued for the next pass) or a failed action; "
        "3 a role still needs an operator.")
    p.add_argument("name", help="the role (every instance of a role with replicas), or one "
                                "instance: NAME/i")
    _json(p, "print the plan and outcomes as JSON")


def health_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the role")
    p.add_argument("--deep", action="store_true", help="ask the server for one token")
    _json(p)


def capabilities_flags(p: argparse.ArgumentParser) -> None:
    _json(p)
    p.add_argument("--devices-yaml", action="store_true",
                   help="print a NodeConfig devices: snippet for the devices found (§7.1)")


def events_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="one role")
    p.add_argument("--since", metavar="DURATION", help="only events newer than this (e.g. 1h)")
    _json(p, "print as JSON lines")


def logs_flags(p: argparse.ArgumentParser) -> None:
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


def models_add_flags(p: argparse.ArgumentParser) -> None:
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


def programs_add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="the server's executable (the shared libraries beside it are "
                                "pinned with it)")
    p.add_argument("--version", metavar="VERSION",
                   help="required: the version as the server reports it, llama.cpp's build "
                        "(b11434: `llama-server --version` prints it), mlx-lm's (0.26.3)")
    p.add_argument("--name", help="the Program name (default: llama-VERSION)")
    p.add_argument("--runtime", choices=("llamacpp", "mlx-lm", "ollama"),
                   help="the server it is (default: from the file name)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the document here")


def _import_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write the manifests into this directory (default: .); only new files")
    p.add_argument("--program-version", metavar="BUILD",
                   help="the llama-server build the lines run (b5361): read with that build's "
                        "flag table, its spellings kept (default: the testbed's b11434, older "
                        "spellings rewritten), and its binary pinned as a Program of that "
                        "version where it is on this machine (§1.7, §14)")


def import_cmd_flags(p: argparse.ArgumentParser) -> None:
    _import_output(p)
    p.add_argument("--name", help="the role's name (default: from the model file)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND…",
                   help="[ENV=VALUE…] llama-server|mlx_lm.server ARGS…, after --")


def import_swap_flags(p: argparse.ArgumentParser) -> None:
    _import_output(p)
    p.add_argument("config", metavar="CONFIG.yaml")
    p.add_argument("--listen", type=int, default=8080, metavar="PORT",
                   help="llama-swap's --listen port: the router listens there (default 8080)")


def models_fetch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--retry", action="store_true",
                   help="forget a failed fetch (a digest mismatch) and try again")


def models_verify_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--full", action="store_true", help="re-hash every byte")
    _json(p)


def group_flags(p: argparse.ArgumentParser) -> None:
    pass