"""The router's decisions, as functions of values (PURE; BEHAVIOUR §9).

Everything the router decides without IO lives here, so it is tested
without a socket:

* ``routes(plan, desired)``: after each pass, every role of this node as a
  ``Route``: the names a request may use for it (its role name, its Model
  name, the name its server knows the model by, its ``aliases``), the one upstream address
  it may be forwarded to (its own loopback host and port, inside
  ``allowed_ports``; never an address a request names), and whether a
  request is forwarded now (``READY``), waits (``WAIT``: starting, loading,
  in backoff, on-demand and not running) or is refused (``REFUSED``, 503,
  with the plan's own words: gave up, unplaceable naming who holds the memory,
  stopped …);
* ``Table.find(model, api)``: which role a request's ``model`` names;
  ``Table.target``: the instances it may go to (§9.1: every instance of the
  ``group`` a name reaches, or the one instance ``chat/1`` names);
* ``upstream_body``: the request body as the server must see it (the model
  renamed to what the server serves, or dropped for mlx-lm, which would load
  whatever a request names; Ollama's ``keep_alive`` set to the role's);
* ``forward_headers``: hop-by-hop headers (RFC 9110 §7.6.1, and any header
  ``Connection`` names), ``Host``, ``Content-Length``, the router's own
  ``Authorization`` and a client's ``X-Api-Key`` are never passed on; ``request_headers`` also sets the
  one ``Content-Type`` of the re-encoded body;
* ``streams``: whether a request asks for a streamed answer;
* ``admits``/``RETRY_AFTER``: the queue's bound (429 beyond ``max_queue``).

Error shapes and the client's credential fields are in ``apis.py``.
"""

from __future__ import annotations

import enum
import json
from typing import Iterable, Mapping

import attrs

from reconciler.core import loopback
from reconciler.core.decisions import Decision, Plan, Reason, Status, Verb
from reconciler.core.desired import Desired, RoleSpec, document_name
from reconciler.runtimes import spec_of
from reconciler.runtimes.ollama import keep_alive_value

frozen = attrs.frozen(kw_only=True)


class Api(enum.StrEnum):
    """Which protocol a request speaks: OpenAI's or Anthropic's Messages (every role; errors
    in its own shape) or Ollama's own (Ollama roles)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OLLAMA = "ollama"


#: The paths the router forwards, and the protocol of each.
PATHS: Mapping[str, Api] = {
    "/v1/chat/completions": Api.OPENAI,
    "/v1/completions": Api.OPENAI,
    "/v1/embeddings": Api.OPENAI,
    "/v1/rerank": Api.OPENAI,
    "/rerank": Api.OPENAI,
    "/v1/responses": Api.OPENAI,
    "/v1/messages": Api.ANTHROPIC,
    "/v1/messages/count_tokens": Api.ANTHROPIC,
    "/api/chat": Api.OLLAMA,
    "/api/generate": Api.OLLAMA,
}

#: Seconds a client told 429 (the queue is full) should wait before trying again.
RETRY_AFTER = 1


class RouteState(enum.StrEnum):
    READY = "ready"  # forwarded now
    WAIT = "wait"  # queued until the role is ready (or the queue times out)
    REFUSED = "refused"  # 503 with the message


@frozen
class Route:
    """One role as the router sees it after a pass."""

    role: str
    names: tuple[str, ...]  # what a request's `model` may say: role, Model, server's name
    host: str
    port: int
    state: RouteState
    message: str = ""  # for REFUSED: the plan's reason, in its words
    status: str = "unknown"  # the role's status, for GET /v1/models
    on_demand: bool = False
    ollama: bool = False  # speaks Ollama's own API (/api/chat, /api/generate) too
    upstream_model: str | None = None  # the name the server serves; None: drop `model`
    keep_alive: float | None = None  # Ollama: re-set on every native request
    #: The role's ``api_key_file``: the proxy sends its key upstream (never the client's).
    key_file: str | None = None
    max_concurrency: int | None = None  # forwarded at once; more wait (None: any)
    #: §9.1/§12 the group a request naming the role reaches (``chat`` for ``chat/1``) …
    group: str = attrs.field(default=attrs.Factory(lambda self: self.role, takes_self=True))
    replica: int = 0  # … and this instance's index in it
    slots: int | None = None  # requests its server takes at once, when known before asking

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@frozen
class Table:
    """Every route of the node, in role order."""

    routes: tuple[Route, ...] = ()

    def get(self, role: str) -> Route | None:
        return next((r for r in self.routes if r.role == role), None)

    def find(self, model: str, api: Api = Api.OPENAI) -> Route | None:
        """The role ``model`` names: a role name first, then the first role (by name) whose
        Model or served name it is. Ollama's own API reaches Ollama roles only."""
        ollama = api is Api.OLLAMA
        exact = next((r for r in self.routes if r.role == model and (r.ollama or not ollama)),
                     None)
        if exact is not None:
            return exact
        return next((r for r in self.routes if model in r.names and (r.ollama or not ollama)),
                    None)

    def members(self, group: str) -> tuple[Route, ...]:
        """§9.1 the instances of ``group``, in replica order."""
        return tuple(sorted((r for r in self.routes if r.group == group),
                            key=lambda r: r.replica))

    def target(self, model: str, api: Api = Api.OPENAI) -> tuple[Route, ...]:
        """§9.1 the routes a request naming ``model`` may go to: one instance named as such
        (``chat/1``), else every instance of the group the name reaches (none: no route)."""
        route = self.find(model, api)
        if route is None:
            return ()
        if route.role == model and route.role != route.group:
            return (route,)
        return self.members(route.group) or (route,)


def routes(plan: Plan, desired: Desired, outcomes: Iterable = ()) -> Table:
    """§9 every role placed on this node, with what the pass made of it: the plan's
    decision, read through its outcome when it acted (a stop that did not happen leaves
    the server running and routed; a stop that did says ``stopped``)."""
    models = {m.name: m for m in desired.models}
    done = {o.role: o for o in outcomes}
    out = []
    for spec in desired.roles:
        decision = plan.decision(spec.name)
        outcome = done.get(spec.name)
        runtime = spec_of(spec.runtime)
        served = runtime.wanted(spec, models.get(spec.model or ""))
        names = tuple(dict.fromkeys(n for n in (spec.name, spec.group,
                                                document_name(spec.model or ""), served,
                                                *spec.aliases) if n))
        state, message = _state(decision, spec, outcome)
        if state is not RouteState.REFUSED and not _forwardable(spec, desired):
            state, message = RouteState.REFUSED, (
                f"{spec.serve.address} is not a loopback port inside allowed_ports; "
                "the router never forwards there")
        out.append(Route(
            role=spec.name, names=names, host=spec.serve.host, port=spec.serve.port,
            state=state, message=message,
            status=_status(decision, outcome),
            on_demand=spec.on_demand, ollama=runtime.loads_models, upstream_model=served,
            keep_alive=spec.keep_alive if runtime.loads_models else None,
            key_file=spec.serve.api_key_file, group=spec.group, replica=spec.replica,
            max_concurrency=spec.max_concurrency, slots=runtime.slots))
    return Table(routes=tuple(out))


def _forwardable(spec: RoleSpec, desired: Desired) -> bool:
    """Only a loopback host, only a port inside allowed_ports (§2, §5)."""
    return (loopback.is_loopback_host(spec.serve.host)
            and desired.node.port_allowed(spec.serve.port))


_READY_KEEPS = (Reason.IN_SYNC, Reason.UNHEALTHY, Reason.UNKNOWN, Reason.ROLLOUT)
_ANSWERING = (Status.RUNNING, Status.DEGRADED)
_COMING_BACK = (Reason.IDLE, Reason.EVICTED)  # an on-demand stop: the next request restarts it


#: What a role is after its decision was carried out (the decision's status is before).
_AFTER = {Verb.START: Status.STARTING, Verb.RESTART: Status.STARTING, Verb.STOP: Status.STOPPED,
          Verb.LOAD: Status.LOADED, Verb.UNLOAD: Status.STOPPED}


def _status(d: Decision | None, outcome) -> str:
    """§9 ``GET /v1/models``'s status: what the daemon did, not what it planned."""
    if d is None:
        return "unknown"
    if outcome is not None and d.verb in _AFTER and (
            outcome.exited if d.verb is Verb.STOP else outcome.ok):
        return str(_AFTER[d.verb])
    return str(d.status)


def _state(d: Decision | None, spec: RoleSpec, outcome=None) -> tuple[RouteState, str]:
    """Forward, wait or refuse, from the role's decision this pass (and its outcome)."""
    if d is None:
        return RouteState.WAIT, ""
    if (d.verb is Verb.STOP and outcome is not None and not outcome.exited
            and d.status in _ANSWERING):
        return RouteState.READY, ""  # the stop did not happen (still in use): still served
    refused = d.why or d.detail or str(d.status)
    if d.verb is Verb.KEEP:
        if d.reason is Reason.ADOPTED:
            if d.status in _ANSWERING:
                return RouteState.READY, ""
            if d.status is Status.LOADING:
                return RouteState.WAIT, ""
            return RouteState.REFUSED, f"{spec.name} is {d.status}: {d.detail}"
        if d.reason in _READY_KEEPS and d.status in _ANSWERING:
            return RouteState.READY, ""
        if d.reason in (Reason.STARTING, Reason.LOADING, Reason.ON_DEMAND):
            return RouteState.WAIT, ""
        return RouteState.REFUSED, f"{spec.name} is {d.status}: {d.detail or refused}"
    if d.verb is Verb.WAIT and d.reason is Reason.ROLLING_UPDATE and d.status in _ANSWERING:
        return RouteState.READY, ""  # §12 its restart waits its turn: it serves meanwhile
    if d.verb in (Verb.START, Verb.RESTART, Verb.LOAD, Verb.WAIT):
        return RouteState.WAIT, ""
    if d.verb is Verb.STOP and d.reason in _COMING_BACK and spec.on_demand:
        return RouteState.WAIT, ""
    if d.verb is Verb.REFUSE:
        return RouteState.REFUSED, f"{spec.name} cannot start: {refused}"
    return RouteState.REFUSED, f"{spec.name} is {d.status}: {d.detail or refused}"


# ---------------------------------------------------------------- requests


def upstream_body(body: Mapping, route: Route, api: Api) -> bytes:
    """The JSON body the role's server gets: its own model name (or none), Ollama's keep_alive."""
    out = dict(body)
    if route.upstream_model is None:
        out.pop("model", None)
    else:
        out["model"] = route.upstream_model
    if api is Api.OLLAMA and route.ollama:
        out["keep_alive"] = keep_alive_value(route.keep_alive)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


#: RFC 9110 §7.6.1 hop-by-hop fields, and what the router sets itself.
_NEVER_FORWARDED = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade",
    "host", "content-length", "authorization", "x-api-key",
})


def forward_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers passed on (either way): no hop-by-hop ones, none that ``Connection`` names."""
    pairs = list(headers)
    named = {token.strip().lower() for key, value in pairs if key.lower() == "connection"
             for token in value.split(",")}
    return [(k, v) for k, v in pairs
            if k.lower() not in _NEVER_FORWARDED and k.lower() not in named]


def request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers the server gets: ``forward_headers``, and one ``Content-Type: application/json``
    (the body is re-encoded as JSON; a client's own type would make a duplicate, which
    strict servers reject with 400). ``Content-Encoding`` goes too: the body is re-encoded."""
    kept = [(k, v) for k, v in forward_headers(headers)
            if k.lower() not in ("content-type", "content-encoding")]
    return [*kept, ("Content-Type", "application/json")]


def streams(body: Mapping, api: Api) -> bool:
    """Whether the answer is a stream: OpenAI's and Anthropic's only with ``stream: true``,
    Ollama's unless ``stream: false`` (its default is to stream)."""
    flag = body.get("stream")
    return flag is True if api is not Api.OLLAMA else flag is not False


def admits(waiting: int, max_queue: int) -> bool:
    """§9 one more request may wait for a role while fewer than ``max_queue`` do."""
    return waiting < max_queue


def models_list(table: Table, created: int = 0) -> bytes:
    """``GET /v1/models``: every role, with its status (OpenAI's list shape)."""
    data = [{"id": r.role, "object": "model", "created": created, "owned_by": "reconciler",
             "status": r.status, "state": str(r.state), "on_demand": r.on_demand,
             "aliases": [n for n in r.names if n != r.role]} for r in table.routes]
    return json.dumps({"object": "list", "data": data}).encode()
