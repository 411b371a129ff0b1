"""The ``extra_args`` checker: one allowlist per runtime, with arity (PURE; BEHAVIOUR §1.4).

Host, port, model, draft, ctx and kv flags belong to the reconciler and are on
no list: a denylist loses to prefix abbreviations (``--hos``), aliases
(``-md``) and ``--flag=value`` forms. So a flag entry must *equal* an allowed
spelling; a flag of arity N takes the next N entries as its values; a value is
1–256 characters of ASCII letters, digits and ``. _ : + - /`` and may start
with ``-`` only when it is a number.

Each runtime declares its table (``RuntimeSpec.flags``, in its module under
``runtimes/``); the checker here is the same for all. A runtime the reconciler
never launches takes none. llama-server's flags move between releases: its
table is checked against the real llama-server the tests run (``llama-server
--help``) in ``tests/manifests/test_extra_args.py``; check it again when the
server the tests run changes.
"""

from __future__ import annotations

import re
from typing import Sequence

from reconciler.core.desired import Runtime
from reconciler.runtimes import spec_of
from reconciler.runtimes.spec import Flag

MAX_ENTRIES = 32
MAX_VALUE_CHARS = 256

#: Flags the reconciler sets itself, for a better message than "not allowed".
OWNED: dict[str, str] = {
    "--host": "spec.serve.host", "--port": "spec.serve.port",
    "--model": "spec.model", "-m": "spec.model",
    "--model-draft": "spec.serve.draft_model", "-md": "spec.serve.draft_model",
    "--ctx-size": "spec.serve.ctx", "-c": "spec.serve.ctx",
    "--cache-type-k": "spec.serve.kv_quant", "-ctk": "spec.serve.kv_quant",
    "--cache-type-v": "spec.serve.kv_quant", "-ctv": "spec.serve.kv_quant",
    "--alias": "the Model name", "-a": "the Model name",
}

_VALUE = re.compile(r"[A-Za-z0-9._:+/-]+")
_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")

Finding = tuple[int | None, str]  # (index into extra_args or None for the list, message)


def check(runtime: Runtime, args: Sequence[object], on_devices: bool = False) -> list[Finding]:
    """Every problem with one role's ``extra_args``; empty when they are allowed.

    ``on_devices``: the role sets ``spec.placement.devices``, so the runtime's
    device flags (``--tensor-split``, ``--main-gpu`` …) are the planner's (§7.1).
    """
    rt = spec_of(runtime)
    if not rt.launched and args:
        return [(None, f"{runtime} takes no extra_args: the reconciler never launches "
                       f"{rt.title}")]
    findings: list[Finding] = []
    if len(args) > MAX_ENTRIES:
        findings.append((None, f"must have at most {MAX_ENTRIES} entries"))
    table = rt.flags
    i = 0
    while i < len(args):
        entry = args[i]
        flag = table.get(entry) if isinstance(entry, str) else None
        owned = rt.devices.owned_flags if on_devices and rt.devices is not None else ()
        if entry in owned:
            findings.append((i, f"{entry} is set by the planner from spec.placement.devices; "
                                "remove it (or remove placement.devices to place the server "
                                "by hand)"))
            follows = i + 1 < len(args) and isinstance(args[i + 1], str)
            i += 2 if follows and not str(args[i + 1]).startswith("--") else 1
            continue
        if flag is None:
            findings.append((i, _not_allowed(runtime, entry)))
            i += 1
            continue
        for k in range(1, flag.arity + 1):
            if i + k >= len(args):
                findings.append((i, f"{entry} takes {flag.arity} value"
                                    f"{'' if flag.arity == 1 else 's'}, but the list ends"))
                break
            problem = _value_problem(str(entry), flag, args[i + k])
            if problem:
                findings.append((i + k, problem))
        i += 1 + flag.arity
    return findings


def _not_allowed(runtime: Runtime, entry: object) -> str:
    if not isinstance(entry, str):
        return "must be a string (quote numbers: \"4\")"
    allowed = spec_of(runtime).flags
    head = entry.split("=", 1)[0]
    base = f"{entry!r} is not an allowed {runtime} flag"
    if head in OWNED:
        return f"{base}: {head} belongs to the reconciler (set {OWNED[head]})"
    if "=" in entry and head in allowed:
        return f"{base}: write {head!r} and its value as two entries, without '='"
    if not _VALUE.fullmatch(entry):
        return f"{base}: entries may hold only letters, digits and . _ : + - / " \
               "(no spaces, tabs, newlines, '=', quotes or shell syntax)"
    if entry.startswith("-") and not _NUMBER.fullmatch(entry):
        if entry.startswith("--") and any(s.startswith(entry) for s in (*allowed, *OWNED)):
            return f"{base}: abbreviations are not accepted, spell the flag out"
        return f"{base} (allowed: {', '.join(sorted(allowed)) or 'none'})"
    return f"{base}: a value must follow the flag it belongs to"


def _value_problem(flag_name: str, flag: Flag, value: object) -> str | None:
    if not isinstance(value, str):
        return f"the value of {flag_name} must be a string (quote numbers: \"4\")"
    if not value:
        return f"the value of {flag_name} must not be empty"
    if len(value) > MAX_VALUE_CHARS:
        return f"the value of {flag_name} must be at most {MAX_VALUE_CHARS} characters"
    if not _VALUE.fullmatch(value):
        return f"the value {value!r} of {flag_name} may hold only letters, digits and " \
               ". _ : + - / (no spaces, tabs, newlines, '=', quotes or shell syntax)"
    if value.startswith("-") and not _NUMBER.fullmatch(value):
        return f"the value {value!r} of {flag_name} may start with '-' only if it is a number"
    if flag.choices and value not in flag.choices:
        return f"the value of {flag_name} must be one of {', '.join(flag.choices)}, " \
               f"not {value!r}"
    return None
