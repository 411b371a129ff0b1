"""A Plan as a Terraform-like text diff, and as JSON (PURE).

Text: one line per decision, in execution order, then a summary line::

    + start coder :8090 (missing)
    ~ restart chat :8091 (spec_changed: ctx 4096 → 8192)
    - stop old :8092 (removed)
    < unload tiny :11434 llama3:8b (removed)
    > load tiny :11434 llama3:8b (missing)
    = keep voice :8093 (in sync)
    … wait coder :8090 (backoff: retry in 8s)
    ! refuse big :8094 (unplaceable: 'big' needs 55.0 GB but only …)
    ! give-up flaky :8095 (max_restarts: exited after 2 restarts …)
    x forget gone :8096 (removed)
    > fetch qwen 4.4 GB (missing on this node; 38.0 GB free)

    Plan: 1 to start, 1 to restart, 1 to stop, 1 to load, 1 to unload; 5 unchanged. 1 to fetch.

Symbols: ``+`` start, ``~`` restart, ``-`` stop, ``>`` load, ``<`` unload,
``=`` keep, ``…`` wait, ``!`` refuse and give-up (a role needing an
operator), ``x`` forget (the record is dropped; nothing is signalled), ``>`` fetch
(a Model's files downloaded, §1.6: listed after the roles, which wait ``fetching``).
The parenthesis holds the reason and, after a colon, its ``why`` (for keep
decisions without a why, the status detail is shown when the role is not
plainly in sync).  When nothing acts the summary reads
``No changes. N unchanged.``; roles that need an operator are counted after it.

JSON (``as_json``), stable field names::

    {
      "format": 1,
      "changes": int,               # number of acting decisions
      "requeue_after": float|null,  # seconds: look again then
      "summary": {"start", "restart", "stop", "load", "unload", "unchanged",
                  "needs_operator", "fetch"}: int,
      "fetches": [{"model": str, "verb": "fetch", "reason": str, "why": str,
                   "bytes": int, "free": int|null, "generation": str}],
      "decisions": [                # in execution order
        {
          "role": str, "verb": str, "reason": str, "why": str,
          "acts": bool,             # true for start/restart/stop/load/unload
          "status": str, "detail": str,   # what the role is now
          "runtime": str|null, "port": int|null,
          "pid": int|null,          # the owned pid a stop/restart targets
          "instance_id": str|null,
          "launch": {"argv": [str], "cwd": str, "digest": str,
                     "env_names": [str]}|null,   # start/restart only; values withheld
          "model_tag": str|null, "keep_alive": float|null,   # load/unload
          "reserve": int, "release": int,   # bytes
          "retry_in": float|null,   # seconds
          "restarts": int,          # restart count after this decision
          "devices": [{"device": str, "bytes": int}]  # §7.1 reserved per device
        }
      ]
    }

Verbs: start stop restart load unload keep wait give-up refuse forget (and fetch).
Reasons and statuses are the ``Reason``/``Status`` values of ``decisions.py``.
"""

from __future__ import annotations

from typing import Any, assert_never

from reconciler.core.decisions import (
    NEEDS_OPERATOR, Decision, Fetch, Forget, GiveUp, Keep, Load, Plan, Reason, Refuse, Restart,
    Start, Status, Stop, Unload, Verb, Wait)
from reconciler.core.units import format_size

SYMBOLS = {
    Verb.START: "+",
    Verb.RESTART: "~",
    Verb.STOP: "-",
    Verb.LOAD: ">",
    Verb.UNLOAD: "<",
    Verb.KEEP: "=",
    Verb.WAIT: "…",
    Verb.REFUSE: "!",
    Verb.GIVE_UP: "!",
    Verb.FORGET: "x",
    Verb.FETCH: ">",
}

_COUNTED = (Verb.START, Verb.RESTART, Verb.STOP, Verb.LOAD, Verb.UNLOAD)
_QUIET_KEEPS = (Reason.IN_SYNC, Reason.ADOPTED, Reason.ABSENT)


def reason_text(d: Decision) -> str:
    """``in sync``, ``missing``, ``spec_changed: ctx 4096 → 8192`` …"""
    label = "in sync" if d.reason is Reason.IN_SYNC else str(d.reason)
    why = d.why
    if not why and d.verb is Verb.KEEP and d.reason not in _QUIET_KEEPS:
        why = d.detail
    if not why and d.reason is Reason.ADOPTED:
        extra = d.detail if d.detail and d.detail != str(d.status) else ""
        why = f"{d.status}, {extra}" if extra and d.status is not Status.RUNNING else str(d.status)
    return f"{label}: {why}" if why else label


def line(d: Decision) -> str:
    parts = [SYMBOLS[d.verb], str(d.verb), d.role]
    if d.port:
        parts.append(f":{d.port}")
    match d.act:
        case Load(tag=tag) | Unload(tag=tag):
            if tag:
                parts.append(tag)
        case Start() | Restart():
            if d.devices:
                parts.append("on " + ", ".join(device for device, _ in d.devices))  # §7.1
        case Stop() | Keep() | Wait() | Refuse() | GiveUp() | Forget():
            pass
        case _:
            assert_never(d.act)
    return " ".join(parts) + f" ({reason_text(d)})"


def counts(plan: Plan) -> dict[str, int]:
    out = {str(v): 0 for v in _COUNTED}
    for d in plan.decisions:
        if d.verb in _COUNTED:
            out[str(d.verb)] += 1
    out["unchanged"] = len(plan.decisions) - len(plan.changes)
    out["needs_operator"] = sum(1 for d in plan.decisions if d.status in NEEDS_OPERATOR)
    out["fetch"] = len(plan.fetches)
    return out


def fetch_line(f: Fetch) -> str:
    """``> fetch qwen 4.4 GB (missing on this node; 38.0 GB free)``; §14 ``> fetch program
    llama-b11434 21.5 MB (…)``."""
    what = f.model.replace("program/", "program ", 1)
    return f"{SYMBOLS[f.verb]} {f.verb} {what} {format_size(f.bytes)} ({f.why or f.reason})"


def fetch_json(f: Fetch) -> dict[str, Any]:
    return {"model": f.model, "verb": str(f.verb), "reason": str(f.reason), "why": f.why,
            "bytes": f.bytes, "free": f.free, "generation": f.generation}


def summary(plan: Plan) -> str:
    c = counts(plan)
    if plan.changes:
        text = (f"Plan: {c['start']} to start, {c['restart']} to restart, {c['stop']} to stop, "
                f"{c['load']} to load, {c['unload']} to unload; {c['unchanged']} unchanged.")
    elif plan.fetches:  # §1.6 a download is a change of the node, if not of a server
        text = f"Plan: {c['fetch']} to fetch; {c['unchanged']} unchanged."
    else:
        text = f"No changes. {c['unchanged']} unchanged."
    if c["needs_operator"]:
        n = c["needs_operator"]
        text += f" {n} {'needs' if n == 1 else 'need'} an operator."
    if c["fetch"] and plan.changes:
        text += f" {c['fetch']} to fetch."
    return text


def text(plan: Plan) -> str:
    """The whole diff: decision lines, a blank line, the summary."""
    lines = [line(d) for d in plan.decisions] + [fetch_line(f) for f in plan.fetches]
    return "\n".join([*lines, "", summary(plan)] if lines else [summary(plan)]) + "\n"


def decision_json(d: Decision) -> dict[str, Any]:
    launch, tag, keep_alive = None, None, None
    match d.act:
        case Start(launch=spawned) | Restart(launch=spawned):
            if spawned is not None:
                launch = {
                    "argv": list(spawned.argv),
                    "cwd": spawned.cwd,
                    "digest": spawned.digest,
                    "env_names": [k for k, _ in spawned.env],
                }
        case Load(tag=tag, keep_alive=keep_alive):
            pass
        case Unload(tag=tag):
            pass
        case Stop() | Keep() | Wait() | Refuse() | GiveUp() | Forget():
            pass
        case _:
            assert_never(d.act)
    return {
        "role": d.role,
        "verb": str(d.verb),
        "reason": str(d.reason),
        "why": d.why,
        "acts": d.acts,
        "status": str(d.status),
        "detail": d.detail,
        "runtime": str(d.runtime) if d.runtime is not None else None,
        "port": d.port,
        "pid": d.pid,
        "instance_id": d.instance_id,
        "launch": launch,
        "model_tag": tag,
        "keep_alive": keep_alive,
        "reserve": d.reserve,
        "release": d.release,
        "retry_in": d.retry_in,
        "restarts": d.restarts,
        "devices": [{"device": device, "bytes": size} for device, size in d.devices],
    }


def as_json(plan: Plan) -> dict[str, Any]:
    """The plan as plain JSON-able data (field reference in the module docstring)."""
    return {
        "format": 1,
        "changes": len(plan.changes),
        "requeue_after": plan.requeue_after,
        "summary": counts(plan),
        "decisions": [decision_json(d) for d in plan.decisions],
        "fetches": [fetch_json(f) for f in plan.fetches],
    }
