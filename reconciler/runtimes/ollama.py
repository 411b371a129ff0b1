"""Ollama: probes, load/unload requests and answers (PURE). Never launched.

Several roles may share one Ollama: the observer runs one ``exchange`` per
host:port and reads it once per role with that role's tag. Only these paths
are ever called: ``/api/version``, ``/api/tags``, ``/api/ps`` (GET), and
``/api/generate`` / ``/api/chat`` (POST) for load, unload and deep health —
never pull, delete or anything else (BEHAVIOUR §2).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from reconciler.observed import Health, ProbeFacts
from reconciler.runtimes.common import (
    ErrorKind,
    Exchange,
    ProbeAnswer,
    ProbeContext,
    ProbeRequest,
    error_message,
    failure_detail,
    hi_messages,
    json_list,
    listed_match,
    unreachable,
)

VERSION = ProbeRequest(method="GET", path="/api/version")
TAGS = ProbeRequest(method="GET", path="/api/tags")
#: /api/ps may block while a load is in flight: a short timeout, read as loading.
PS_TIMEOUT = 1.0
PS = ProbeRequest(method="GET", path="/api/ps", max_timeout=PS_TIMEOUT)


def exchange(ctx: ProbeContext | None = None) -> Exchange:
    """``/api/version``; if it answers, ``/api/tags`` and ``/api/ps`` together.

    The same for every role on the endpoint: ``ctx`` is not consulted.
    """
    (version,) = yield (VERSION,)
    out = {VERSION.path: version}
    if version.ok:
        tags, ps = yield (TAGS, PS)
        out[TAGS.path] = tags
        out[PS.path] = ps
    return out


def model_names(body: Any) -> tuple[str, ...]:
    """``models[].name`` (or ``.model``) of ``/api/tags`` and ``/api/ps``."""
    names = []
    for item in json_list(body, "models"):
        if isinstance(item, dict):
            name = item.get("name") or item.get("model")
            if isinstance(name, str):
                names.append(name)
    return tuple(dict.fromkeys(names))


def read(answers: Mapping[str, ProbeAnswer], ctx: ProbeContext) -> ProbeFacts:
    """One endpoint's answers → one role's facts (``ctx.wanted`` = its tag)."""
    version = answers[VERSION.path]
    if not version.answered:
        return unreachable(VERSION, version, ctx)
    if not version.ok:
        return ProbeFacts(
            health=Health.UNHEALTHY, detail=failure_detail(VERSION, version),
            latency=version.latency,
        )
    release = version.body.get("version") if isinstance(version.body, dict) else None
    facts = ProbeFacts(
        health=Health.UP, detail="answering",
        version=release if isinstance(release, str) else None, latency=version.latency,
    )
    tags = answers.get(TAGS.path, ProbeAnswer())
    if not tags.ok:
        return attrs.evolve(facts, health=Health.UNHEALTHY, detail=failure_detail(TAGS, tags))
    listed = model_names(tags.body)
    ps = answers.get(PS.path, ProbeAnswer())
    resident = model_names(ps.body) if ps.ok else ()
    wanted = ctx.wanted
    # Every fact is kept whatever the verdict: the planner unloads by resident_models.
    facts = attrs.evolve(
        facts, listed_models=listed, resident_models=resident,
        identity=listed_match(wanted, resident) if wanted else None,
    )
    if wanted and listed_match(wanted, listed) is None:
        # The server itself is fine and its lists are trustworthy (UP); the
        # planner refuses the role from listed_models. UNHEALTHY is kept for
        # answers whose lists cannot be trusted, on which nothing may act.
        return attrs.evolve(
            facts,
            detail=f"model {wanted} is not listed by the server (not pulled; never pulled for you)",
        )
    if ps.error is ErrorKind.TIMEOUT:
        return attrs.evolve(
            facts, health=Health.LOADING, detail=f"loading model (/api/ps {ps.error_detail})"
        )
    if not ps.ok:
        return attrs.evolve(facts, health=Health.UNHEALTHY, detail=failure_detail(PS, ps))
    if not wanted:
        return facts
    detail = f"{wanted} is resident" if facts.identity else f"{wanted} is pulled, not resident"
    return attrs.evolve(facts, detail=detail)


# ---------------------------------------------------------------- load, unload, deep


def keep_alive_value(seconds: float | None) -> int | float | None:
    """Ollama reads a JSON number as seconds; any negative number is forever."""
    if seconds is None:
        return None
    if math.isinf(seconds):
        return -1
    return int(seconds) if float(seconds).is_integer() else seconds


def load_request(tag: str, keep_alive: float | None) -> ProbeRequest:
    """An empty prompt loads the model and sets its keep-alive."""
    body = {"model": tag, "prompt": "", "stream": False, "keep_alive": keep_alive_value(keep_alive)}
    return ProbeRequest(method="POST", path="/api/generate", body=body)


def unload_request(tag: str) -> ProbeRequest:
    """``keep_alive: 0`` unloads. Only for a model this reconciler loaded."""
    body = {"model": tag, "prompt": "", "stream": False, "keep_alive": 0}
    return ProbeRequest(method="POST", path="/api/generate", body=body)


def read_load(request: ProbeRequest, answer: ProbeAnswer) -> tuple[bool, str]:
    """Did a load/unload succeed? ``(ok, one line)``; 404 = not pulled."""
    tag = request.body.get("model") if isinstance(request.body, dict) else None
    if answer.ok:
        reason = answer.body.get("done_reason") if isinstance(answer.body, dict) else None
        return True, f"{tag}: {reason or 'done'}"
    if answer.status == 404:
        return False, f"{tag}: {error_message(answer) or 'not found'} (not pulled; never pulled for you)"
    return False, failure_detail(request, answer)


def deep_request(tag: str, keep_alive: float | None) -> ProbeRequest:
    """One token over ``/api/chat``; re-sets ``keep_alive`` to the desired value."""
    body = {
        "model": tag,
        "messages": hi_messages(),
        "stream": False,
        "keep_alive": keep_alive_value(keep_alive),
        "options": {"num_predict": 1},
    }
    return ProbeRequest(method="POST", path="/api/chat", body=body)
