"""The router's pure decisions (BEHAVIOUR §9): routes from a plan, names, bodies, headers, errors."""

from __future__ import annotations

import json

import attrs

from reconciler.core.decisions import Decision, Plan, Reason, Status, Verb, flat
from reconciler.core.desired import Mode, NodeConfig, RoleSpec, Runtime, ServeSpec, WantedState
from reconciler.router import apis, rules
from reconciler.router.rules import Api, Route, RouteState, Table
from tests.support.routing import NODE, routes


def _role(name: str, port: int, *, state=WantedState.RUNNING, host: str = "127.0.0.1",
          runtime=Runtime.LLAMACPP, model: str = "qwen") -> RoleSpec:
    return RoleSpec(name=name, runtime=runtime, mode=Mode.MANAGED, model=model, state=state,
                    serve=ServeSpec(port=port, host=host))


def _table(*pairs: tuple[RoleSpec, Decision | None], node: NodeConfig = NODE) -> Table:
    return routes(Plan(decisions=tuple(d for _, d in pairs if d is not None)),
                  (p[0] for p in pairs), node=node)


def test_a_running_role_in_sync_is_ready_and_named_by_role_and_model() -> None:
    """keep in_sync + running → READY, reachable by its role name and its Model name."""
    table = _table((_role("chat", 8080),
                    flat(role="chat", verb=Verb.KEEP, reason=Reason.IN_SYNC,
                             status=Status.RUNNING)))
    route = table.find("chat")
    assert route is not None and route.state is RouteState.READY
    assert table.find("qwen") == route
    assert (route.authority, route.status) == ("127.0.0.1:8080", "running")


def test_on_demand_starting_and_evicted_roles_wait() -> None:
    """A demanded start, a start in progress and an on-demand role stopped as idle all WAIT."""
    on_demand = WantedState.ON_DEMAND
    table = _table(
        (_role("a", 8080, state=on_demand),
         flat(role="a", verb=Verb.START, reason=Reason.DEMAND, status=Status.STOPPED)),
        (_role("b", 8081), flat(role="b", verb=Verb.KEEP, reason=Reason.STARTING,
                                    status=Status.STARTING)),
        (_role("c", 8082, state=on_demand),
         flat(role="c", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.IDLE, status=Status.RUNNING)),
        (_role("d", 8083, state=on_demand),
         flat(role="d", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.EVICTED, status=Status.RUNNING)))
    assert [r.state for r in table.routes] == [RouteState.WAIT] * 4


def test_refused_role_carries_the_plans_words() -> None:
    """A refused start is REFUSED (503) with the planner's reason, naming who holds memory."""
    table = _table((_role("big", 8080, state=WantedState.ON_DEMAND),
                    flat(role="big", verb=Verb.REFUSE, reason=Reason.UNPLACEABLE,
                             why="needs 8 GB, 2 GB free (chat holds 6 GB)",
                             status=Status.STOPPED)))
    route = table.get("big")
    assert route is not None and route.state is RouteState.REFUSED
    assert route.message == "big cannot start: needs 8 GB, 2 GB free (chat holds 6 GB)"


def test_a_port_outside_allowed_ports_or_loopback_is_never_forwarded_to() -> None:
    """§5 a ready role on a non-loopback host or a port outside allowed_ports is REFUSED."""
    keep = dict(verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING)
    table = _table((_role("far", 8080, host="10.0.0.5"), flat(role="far", **keep)),
                   (_role("out", 9500), flat(role="out", **keep)))
    assert [r.state for r in table.routes] == [RouteState.REFUSED, RouteState.REFUSED]
    assert "never forwards there" in table.get("out").message


def test_find_prefers_a_role_name_and_ollama_api_reaches_only_ollama_roles() -> None:
    """A role name beats another role's Model name; /api/* never reaches a llama.cpp role."""
    a = Route(role="a", names=("a", "b"), host="127.0.0.1", port=1, state=RouteState.READY)
    b = Route(role="b", names=("b", "m"), host="127.0.0.1", port=2, state=RouteState.READY,
              ollama=True)
    table = Table(routes=(a, b))
    assert table.find("b") == b
    assert table.find("m", Api.OLLAMA) == b
    assert table.find("a", Api.OLLAMA) is None
    assert table.find("nope") is None


def test_upstream_body_renames_drops_and_sets_keep_alive() -> None:
    """The server sees its own model name (none for mlx-lm) and, on /api/*, the role's keep_alive."""
    route = Route(role="r", names=("r",), host="127.0.0.1", port=1, state=RouteState.READY,
                  upstream_model="served")
    assert json.loads(rules.upstream_body({"model": "r", "x": 1}, route, Api.OPENAI)) == {
        "model": "served", "x": 1}
    dropped = Route(role="r", names=("r",), host="127.0.0.1", port=1, state=RouteState.READY)
    assert json.loads(rules.upstream_body({"model": "r"}, dropped, Api.OPENAI)) == {}
    ollama = Route(role="o", names=("o",), host="127.0.0.1", port=1, state=RouteState.READY,
                   ollama=True, upstream_model="llama3.2:3b", keep_alive=600.0)
    body = json.loads(rules.upstream_body({"model": "o", "keep_alive": 0}, ollama, Api.OLLAMA))
    assert body == {"model": "llama3.2:3b", "keep_alive": 600}


def test_hop_by_hop_and_connection_named_headers_are_dropped() -> None:
    """RFC 9110 §7.6.1 headers, those Connection names, Host, Content-Length, Authorization go."""
    kept = rules.forward_headers([
        ("Connection", "keep-alive, X-Secret"), ("X-Secret", "1"), ("Keep-Alive", "5"),
        ("Transfer-Encoding", "chunked"), ("Host", "a"), ("Content-Length", "3"),
        ("Authorization", "Bearer k"), ("Accept", "text/event-stream"), ("X-Request-Id", "7")])
    assert kept == [("Accept", "text/event-stream"), ("X-Request-Id", "7")]


def test_error_body_has_openais_shape() -> None:
    """{"error": {"message", "type", "code"}}, as the openai client parses it."""
    assert json.loads(apis.error_body("no", "invalid_request_error", 404)) == {
        "error": {"message": "no", "type": "invalid_request_error", "code": 404}}


def test_queue_bound_and_bearer_parsing() -> None:
    """max_queue waiters at most; the Bearer scheme is case-insensitive, anything else is no key."""
    assert rules.admits(63, 64) and not rules.admits(64, 64)
    assert apis.bearer("bearer  k1 ") == "k1"
    assert apis.bearer("Basic k1") is None and apis.bearer(None) is None
    assert apis.bearer("Bearer ") is None


def test_models_list_shows_every_role_with_status() -> None:
    """GET /v1/models: OpenAI's list shape, each role with status, state and aliases."""
    table = Table(routes=(Route(role="chat", names=("chat", "qwen"), host="127.0.0.1", port=1,
                                state=RouteState.WAIT, status="stopped", on_demand=True),))
    listed = json.loads(rules.models_list(table))
    assert listed["object"] == "list"
    assert listed["data"] == [{"id": "chat", "object": "model", "created": 0,
                               "owned_by": "reconciler", "status": "stopped", "state": "wait",
                               "on_demand": True, "aliases": ["qwen"]}]


def test_request_headers_carry_exactly_one_json_content_type() -> None:
    """The client's Content-Type (and Content-Encoding) give way to the re-encoded body's one."""
    sent = rules.request_headers([("Content-Type", "application/octet-stream"),
                                  ("content-encoding", "gzip"), ("X-A", "1")])
    assert sent == [("X-A", "1"), ("Content-Type", "application/json")]


def test_streams_follows_each_apis_default() -> None:
    """OpenAI streams only with stream: true; Ollama streams unless stream: false."""
    assert rules.streams({"stream": True}, Api.OPENAI)
    assert not rules.streams({}, Api.OPENAI) and not rules.streams({"stream": 1}, Api.OPENAI)
    assert rules.streams({}, Api.OLLAMA) and not rules.streams({"stream": False}, Api.OLLAMA)


def test_aliases_route_and_embedding_and_rerank_paths_are_forwarded() -> None:
    """An alias (any text, `/` included) finds its role; /v1/models lists it; the embedding
    and rerank endpoints are forwarded like chat."""
    spec = RoleSpec(name="emb", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                    serve=ServeSpec(port=8080), aliases=("Qwen/Qwen3-Embedding", "e 1"))
    table = _table((spec, flat(role="emb", verb=Verb.KEEP, reason=Reason.IN_SYNC,
                                   status=Status.RUNNING)))
    route = table.find("Qwen/Qwen3-Embedding")
    assert route is not None and route.role == "emb" and table.find("e 1") == route
    assert route.upstream_model == "qwen"  # the server gets the name it serves
    listed = json.loads(rules.models_list(table))["data"][0]["aliases"]
    assert "Qwen/Qwen3-Embedding" in listed and "e 1" in listed
    for path in ("/v1/embeddings", "/v1/rerank", "/rerank"):
        assert rules.PATHS[path] is Api.OPENAI


def test_routes_follow_what_the_pass_did_not_what_it_planned() -> None:
    """§9 a stop that happened says stopped (and waits); one the router called off (in use)
    leaves the role running and ready; a start that happened says starting."""
    from reconciler.core.outcomes import Guard, Outcome, Refusal

    on_demand = WantedState.ON_DEMAND
    roles = (_role("a", 8080, state=on_demand), _role("b", 8081, state=on_demand),
             _role("c", 8082, state=on_demand))
    stop = dict(verb=Verb.STOP, reason=Reason.IDLE, status=Status.RUNNING, pid=7, create_time=1.0)
    plan = Plan(decisions=(
        flat(role="a", **stop), flat(role="b", **stop),
        flat(role="c", verb=Verb.START, reason=Reason.DEMAND, status=Status.STOPPED)))
    outcomes = (
        Outcome(role="a", verb=Verb.STOP, ok=True, exited=True),
        Outcome(role="b", verb=Verb.STOP, ok=False,
                refusal=Refusal(guard=Guard.IN_USE, detail="1 request(s) in flight")),
        Outcome(role="c", verb=Verb.START, ok=True, pid=5))
    table = routes(plan, roles, outcomes)
    got = {r.role: (r.state, r.status) for r in table.routes}
    assert got == {"a": (RouteState.WAIT, "stopped"), "b": (RouteState.READY, "running"),
                   "c": (RouteState.WAIT, "starting")}
    planned = _table(*zip(roles, plan.decisions))  # without outcomes: the plan's own words
    assert {r.role: r.status for r in planned.routes} == {
        "a": "running", "b": "running", "c": "stopped"}


def test_every_interface_is_never_loopback_to_the_router() -> None:
    """Rule (§5): `::` (and 0.0.0.0) is every interface, never loopback: a role whose host
    says so is refused, while ::1 is loopback and forwarded to."""
    keep = dict(verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING)
    table = _table((_role("any6", 8080, host="::"), flat(role="any6", **keep)),
                   (_role("any4", 8081, host="0.0.0.0"), flat(role="any4", **keep)),
                   (_role("lo6", 8082, host="::1"), flat(role="lo6", **keep)))
    assert [r.state for r in table.routes] == [RouteState.REFUSED, RouteState.REFUSED,
                                               RouteState.READY]


def test_a_credential_field_given_twice_is_ambiguous() -> None:
    """§9 ``ambiguous``: ``Authorization`` (or ``X-Api-Key``) twice, in any case, is named;
    a bearer key and an ``X-Api-Key`` that differ are (both are read as the client's key);
    once each with the same key, or other fields repeated, is not."""
    assert apis.ambiguous([("Authorization", "Bearer a"), ("authorization", "Bearer b")])
    assert "X-API-KEY" in apis.ambiguous([("x-api-key", "a"), ("X-API-KEY", "a")])
    assert "different keys" in apis.ambiguous([("Authorization", "Bearer a"),
                                                ("X-Api-Key", "b")])
    assert apis.ambiguous([("Authorization", "Bearer a"), ("X-Api-Key", "a"),
                      ("Accept", "x"), ("Accept", "y")]) is None
    assert apis.ambiguous([("Authorization", "Basic YTpi"), ("X-Api-Key", "b")]) is None
    assert apis.ambiguous([]) is None


def test_the_clients_key_is_its_bearer_token_else_its_x_api_key() -> None:
    """§9 ``credential``: Anthropic's clients send their key as ``X-Api-Key``, OpenAI's as
    ``Authorization: Bearer``; either is the client's key, the bearer one first."""
    assert apis.credential({"Authorization": "Bearer a"}) == "a"
    assert apis.credential({"X-Api-Key": " k "}) == "k"
    assert apis.credential({"Authorization": "Basic YTpi", "X-Api-Key": "k"}) == "k"
    assert apis.credential({"X-Api-Key": ""}) is None and apis.credential({}) is None


def test_anthropics_paths_speak_its_api_and_find_any_role() -> None:
    """§9 ``/v1/messages`` and ``/v1/messages/count_tokens`` are Anthropic's API, ``/v1/responses``
    OpenAI's: every role is found by its names on them (Ollama's own API only Ollama roles),
    and a stream is asked for only by ``stream: true``."""
    assert rules.PATHS["/v1/messages"] is rules.PATHS["/v1/messages/count_tokens"] \
        is rules.Api.ANTHROPIC
    assert rules.PATHS["/v1/responses"] is rules.Api.OPENAI
    table = rules.Table(routes=(rules.Route(role="chat", names=("chat", "qwen"),
                                            host="127.0.0.1", port=8080,
                                            state=RouteState.READY),))
    assert table.find("qwen", rules.Api.ANTHROPIC).role == "chat"
    assert table.find("qwen", rules.Api.OLLAMA) is None
    assert rules.streams({"stream": True}, rules.Api.ANTHROPIC)
    assert not rules.streams({}, rules.Api.ANTHROPIC)


def test_anthropics_error_shape_names_its_type_by_status() -> None:
    """§9 an error on Anthropic's paths is ``{"type": "error", "error": {"type", "message"}}``,
    the type Anthropic's for the status (its clients raise their exception class from it)."""
    kinds = {status: json.loads(apis.anthropic_error_body("m", status))
             for status in (400, 401, 404, 413, 429, 503, 502, 504, 408)}
    assert kinds[404] == {"type": "error", "error": {"type": "not_found_error", "message": "m"}}
    assert {s: k["error"]["type"] for s, k in kinds.items()} == {
        400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
        413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
        502: "api_error", 504: "api_error", 408: "invalid_request_error"}


def test_cors_allows_only_a_listed_origin_exactly() -> None:
    """§9 cors_origins: ``https://a.example`` listed allows that origin only — not
    ``https://a.example.evil``, ``https://a.exampl`` or ``http://a.example``; ``*`` any."""
    from reconciler.router import clients

    listed = ("https://a.example",)
    assert clients.cors("https://a.example", listed)["Access-Control-Allow-Origin"] == \
        "https://a.example"
    for other in ("https://a.example.evil", "https://a.exampl", "http://a.example",
                  "https://a.example:8443", None):
        assert clients.cors(other, listed) == {} and not clients.allowed(other, listed)
    assert clients.allowed("https://b.example", ("*",))


def test_a_roles_api_key_file_and_max_concurrency_reach_its_route() -> None:
    """§9 routes(): a role with ``api_key_file`` gets its key from the router (its route names
    the file the proxy reads the key from) and ``max_concurrency`` caps requests at its
    server (its route carries the cap); a role without either has neither."""
    keyed = attrs.evolve(_role("chat", 8080), max_concurrency=2,
                         serve=ServeSpec(port=8080, host="127.0.0.1", api_key_file="/k/chat"))
    running = dict(verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING)
    table = _table((keyed, flat(role="chat", **running)),
                   (_role("plain", 8081), flat(role="plain", **running)))
    chat, plain = table.get("chat"), table.get("plain")
    assert (chat.key_file, chat.max_concurrency) == ("/k/chat", 2)
    assert (plain.key_file, plain.max_concurrency) == (None, None)


def test_an_mlx_role_has_one_slot_and_a_llamacpp_role_is_asked() -> None:
    """§9.1 routes(): mlx_lm.server answers one generation at a time (its route says 1 slot);
    llama-server's slots are unknown until its ``/props`` is read (None)."""
    running = dict(verb=Verb.KEEP, reason=Reason.IN_SYNC, status=Status.RUNNING)
    table = _table((_role("mlx", 8080, runtime=Runtime.MLX_LM), flat(role="mlx", **running)),
                   (_role("gguf", 8081), flat(role="gguf", **running)))
    assert (table.get("mlx").slots, table.get("gguf").slots) == (1, None)


def test_a_group_name_targets_every_instance_and_an_instance_name_only_itself() -> None:
    """§9.1 ``Table.target``: the group's name or an alias → every instance, in replica
    order; ``chat/1`` → that instance alone; a role without replicas → itself."""
    def route(role: str, group: str, replica: int) -> Route:
        return Route(role=role, names=(role, group, "qwen"), host="127.0.0.1",
                     port=8000 + replica, state=RouteState.READY, group=group,
                     replica=replica)
    table = Table(routes=(route("chat/2", "chat", 2), route("chat", "chat", 0),
                          route("chat/1", "chat", 1), route("solo", "solo", 0)))
    assert [r.role for r in table.target("chat")] == ["chat", "chat/1", "chat/2"]
    assert [r.role for r in table.target("qwen")] == ["chat", "chat/1", "chat/2"]
    assert [r.role for r in table.target("chat/1")] == ["chat/1"]
    assert [r.role for r in table.target("solo")] == ["solo"]
    assert table.target("nobody") == ()
    assert Route(role="x", names=("x",), host="h", port=1, state=RouteState.READY).group == "x"
