"""Ollama: probes, load/unload requests, answers and tag names (PURE). Never launched.

Several roles may share one Ollama: the observer runs one ``exchange`` per
host:port and reads it once per role with that role's tag. Tags compare
``:latest``-equivalently (``same_tag``), in the observer and the planner alike. Only these paths
are ever called: ``/api/version``, ``/api/tags``, ``/api/ps`` (GET), and
``/api/generate`` / ``/api/chat`` (POST) for load, unload and deep health —
never pull, delete or anything else (BEHAVIOUR §2).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import attrs

from reconciler.core.desired import ModelFormat, ModelSpec, NodeConfig, RoleSpec, Runtime
from reconciler.core.observed import Health, ProbeFacts
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
    unreachable,
)
from reconciler.runtimes.spec import RuntimeSpec

#: Ollama listens here unless the manifest says otherwise.
DEFAULT_PORT = 11434

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


@functools.lru_cache(maxsize=4096)  # pure; the planner compares the same few tags per role
@functools.lru_cache(maxsize=16_384)
def normal_tag(tag: str) -> str:
    """``Library/Llama3`` → ``library/llama3:latest`` → ``llama3:latest``.

    Kept for the names seen lately: the planner compares every Ollama role's tag
    with what its server lists, on every pass."""
    name = tag.strip().lower()
    for prefix in ("registry.ollama.ai/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def same_tag(a: str, b: str) -> bool:
    """Do two Ollama names mean one model? (``llama3`` is ``library/llama3:latest``.)"""
    if a == b:
        return bool(a.strip())
    return bool(a.strip()) and bool(b.strip()) and normal_tag(a) == normal_tag(b)


def _match(wanted: str, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if same_tag(wanted, name)), None)


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
        identity=_match(wanted, resident) if wanted else None,
    )
    if wanted and _match(wanted, listed) is None:
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


def _tag(role: RoleSpec, model: ModelSpec | None) -> str | None:
    return model.ollama_tag if model is not None else None


def _deep(role: RoleSpec, model: ModelSpec | None, node: NodeConfig,
          listed: tuple[str, ...]) -> ProbeRequest | str:
    tag = _tag(role, model)
    if not tag:
        return f"role {role.name} names no Ollama model tag"
    return deep_request(tag, role.keep_alive if role.keep_alive is not None else node.keep_alive)


SPEC = RuntimeSpec(
    runtime=Runtime.OLLAMA,
    title="Ollama",
    launched=False,
    managed=True,
    shared_endpoint=True,
    loads_models=True,
    default_port=DEFAULT_PORT,
    formats=frozenset({ModelFormat.OLLAMA}),
    exchange=exchange,
    read=read,
    wanted=_tag,
    names_match=same_tag,
    identity="GET /api/ps names (:latest-equivalent)",
    deep_request=_deep,
    load_request=load_request,
    unload_request=unload_request,
    read_load=read_load,
)
