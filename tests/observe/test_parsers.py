"""Pure probe exchanges and answer parsers, per runtime (scripted answers, no sockets)."""

from __future__ import annotations

import attrs

import pytest

from reconciler.core.decisions import Status
from reconciler.core.observed import Health, ProbeFacts
from reconciler.runtimes import llamacpp, mlx_lm, ollama, openai
from reconciler.runtimes.common import (
    ErrorKind,
    ProbeAnswer,
    ProbeContext,
    deep_verdict,
    probe_status,
)
from tests.observe.scripted import REFUSED, TIMEOUT, drive, ok

MODEL_PATH = "/models/tiny.gguf"
LLAMA_UP = {
    "/health": ok({"status": "ok"}),
    "/v1/models": ok({"object": "list", "data": [{"id": "tiny", "object": "model"}]}),
    "/props": ok({"model_path": MODEL_PATH, "build_info": "b1"}),
}


def llama(script: dict[str, ProbeAnswer], **ctx: object) -> tuple[ProbeFacts, list[str]]:
    context = ProbeContext(**ctx)  # type: ignore[arg-type]
    answers, sent = drive(llamacpp.exchange(context), script)
    return llamacpp.read(answers, context), [str(r) for r in sent]


# ---------------------------------------------------------------- llama.cpp


def test_llamacpp_up_lists_alias_and_model_path() -> None:
    """200 /health → up; listed = /v1/models ids; identity = /props model_path."""
    facts, sent = llama(LLAMA_UP, wanted="tiny")
    assert facts.health is Health.UP
    assert facts.listed_models == ("tiny",)
    assert facts.identity == MODEL_PATH
    assert sent == ["GET /health", "GET /v1/models", "GET /props"]
    assert probe_status(facts) == (Status.RUNNING, "healthy; serving tiny")


def test_llamacpp_503_is_loading_and_asks_nothing_more() -> None:
    """503 /health → loading model, no further requests."""
    loading = ok({"error": {"message": "Loading model", "code": 503}}, status=503)
    facts, sent = llama({"/health": loading}, wanted="tiny")
    assert (facts.health, facts.detail) == (Health.LOADING, "loading model")
    assert sent == ["GET /health"]
    assert probe_status(facts)[0] is Status.LOADING


def test_llamacpp_404_health_falls_back_to_models() -> None:
    """A server without /health: /v1/models 200 decides up, 503 decides loading."""
    script = dict(LLAMA_UP, **{"/health": ok("nope", status=404)})
    facts, sent = llama(script, wanted="tiny")
    assert facts.health is Health.UP and facts.identity == MODEL_PATH
    assert sent == ["GET /health", "GET /v1/models", "GET /props"]
    script["/v1/models"] = ok({"error": "loading"}, status=503)
    facts, sent = llama(script, wanted="tiny")
    assert facts.health is Health.LOADING
    assert sent == ["GET /health", "GET /v1/models"]


def test_llamacpp_alias_not_listed_is_unhealthy() -> None:
    """Answering but without the wanted alias → unhealthy, 'model X is not listed'."""
    facts, _ = llama(LLAMA_UP, wanted="coder")
    assert facts.health is Health.UNHEALTHY
    assert facts.detail == "model coder is not listed by the server"
    assert probe_status(facts) == (Status.DEGRADED, facts.detail)


def test_llamacpp_listed_path_matches_wanted_name() -> None:
    """Without an alias the server lists its model path; the file stem matches."""
    script = dict(LLAMA_UP, **{"/v1/models": ok({"data": [{"id": "/m/Tiny-Q4.gguf"}]})})
    facts, _ = llama(script, wanted="tiny")
    assert facts.health is Health.UP


def test_llamacpp_newer_models_shape_is_read() -> None:
    """Newer servers also list ``models[].name``; both shapes count."""
    body = {"models": [{"name": "a", "model": "a"}], "data": [{"id": "b"}]}
    assert openai.model_ids(body) == ("b", "a")
    assert openai.model_ids({"data": "garbage"}) == ()
    assert openai.model_ids(None) == ()


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (REFUSED, "not listening (connection refused)"),
        (TIMEOUT, "no answer to GET /health within 1s"),
        (ProbeAnswer(error=ErrorKind.TOO_LARGE), "GET /health: answer larger than 1 MiB"),
        (ok(None, status=302), "GET /health answered 302 (redirects are not followed)"),
    ],
)
def test_llamacpp_failures_have_one_line_details(answer: ProbeAnswer, detail: str) -> None:
    """Refused, timeout, oversized and redirect each read as a clear one-liner."""
    facts, sent = llama({"/health": answer})
    assert facts.detail == detail
    assert sent == ["GET /health"]
    expected = Health.UNHEALTHY if answer.answered else Health.UNREACHABLE
    assert facts.health is expected


def test_refused_while_starting_reads_starting() -> None:
    """Right after a start, refused is 'starting: not listening yet'; otherwise unknown."""
    facts, _ = llama({"/health": REFUSED}, starting=True)
    assert probe_status(facts) == (
        Status.STARTING, "starting: not listening yet (connection refused)"
    )
    facts, _ = llama({"/health": TIMEOUT})
    assert probe_status(facts)[0] is Status.UNKNOWN  # unknown is not down


def test_starting_is_a_field_not_a_prefix() -> None:
    """The phase travels in ProbeFacts.starting; a detail's wording decides nothing."""
    facts, _ = llama({"/health": TIMEOUT}, starting=True)
    assert facts.starting and facts.detail == "starting: no answer to GET /health within 1s"
    assert probe_status(facts) == (Status.STARTING, facts.detail)
    lookalike = ProbeFacts(health=Health.UNREACHABLE, detail="starting: said the server")
    assert probe_status(lookalike)[0] is Status.UNKNOWN
    assert not llama({"/health": REFUSED})[0].starting


def test_llamacpp_models_unreadable_is_unhealthy_when_a_model_is_wanted() -> None:
    """/health 200 but /v1/models 500: cannot confirm the alias → unhealthy."""
    script = dict(LLAMA_UP, **{"/v1/models": ok({"error": "boom"}, status=500)})
    facts, _ = llama(script, wanted="tiny")
    assert facts.health is Health.UNHEALTHY
    assert facts.detail == "cannot list models: GET /v1/models answered 500: boom"
    facts, _ = llama(script)
    assert facts.health is Health.UP


def test_llamacpp_deep_request_names_the_alias() -> None:
    """Deep health: chat completion with model = alias, one token, not streamed."""
    req = llamacpp.deep_request("tiny")
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.body == {
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1, "stream": False,
    }


# ---------------------------------------------------------------- mlx-lm


def mlx(script: dict[str, ProbeAnswer], **ctx: object) -> tuple[ProbeFacts, list[str], list]:
    context = ProbeContext(**ctx)  # type: ignore[arg-type]
    answers, sent = drive(mlx_lm.exchange(context), script)
    return mlx_lm.read(answers, context), [str(r) for r in sent], sent


def test_mlx_readiness_is_a_one_token_completion_without_model() -> None:
    """After a start: /health, then POST /v1/completions {prompt, max_tokens:1}, no model."""
    script = {"/health": ok({"status": "ok"}), "/v1/completions": ok({"choices": []})}
    facts, sent, requests = mlx(script, readiness=True,
                                launch_argv=("/bin/mlx_lm.server", "--model", "/m/tiny-mlx"))
    assert sent == ["GET /health", "POST /v1/completions"]
    assert requests[1].body == {"prompt": "hi", "max_tokens": 1}
    assert facts.health is Health.UP and facts.identity == "/m/tiny-mlx"


def test_mlx_health_200_alone_is_not_ready_after_a_start() -> None:
    """/health 200 before the model loads: a completion timeout reads as loading."""
    script = {"/health": ok({"status": "ok"}), "/v1/completions": TIMEOUT}
    facts, _, _ = mlx(script, readiness=True)
    assert facts.health is Health.LOADING
    assert facts.detail.startswith("loading model")


def test_mlx_adopted_only_gets() -> None:
    """An adopted mlx-lm server only ever receives GET /health, even if readiness is asked."""
    script = {"/health": ok({"status": "ok"}), "/v1/completions": ok({})}
    facts, sent, _ = mlx(script, readiness=True, adopted=True)
    assert sent == ["GET /health"]
    assert facts.health is Health.UP


def test_mlx_after_ready_only_health() -> None:
    """Once ready: GET /health only; 503 means the generation thread died."""
    facts, sent, _ = mlx({"/health": ok({"status": "ok"})})
    assert sent == ["GET /health"] and facts.health is Health.UP
    facts, _, _ = mlx({"/health": ok({"status": "error"}, status=503)})
    assert facts.health is Health.UNHEALTHY
    assert "generation thread died" in facts.detail


def test_mlx_completion_404_thread_died_is_unhealthy() -> None:
    """A 404 'generation thread died' on the readiness completion → unhealthy."""
    script = {
        "/health": ok({"status": "ok"}),
        "/v1/completions": ok({"error": "generation thread died"}, status=404),
    }
    facts, _, _ = mlx(script, readiness=True)
    assert (facts.health, facts.detail) == (Health.UNHEALTHY, "generation thread died")


def test_mlx_identity_from_argv_and_deep_without_model() -> None:
    """Identity is the launched --model; deep health names no model."""
    assert mlx_lm.argv_model(("/bin/s", "--model", "/m/x", "--port", "1")) == "/m/x"
    assert mlx_lm.argv_model(("/bin/s", "--port", "1")) is None
    assert "model" not in mlx_lm.deep_request().body


# ---------------------------------------------------------------- ollama

TAGS = ok({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest"}]})
PS = ok({"models": [{"name": "llama3.2:latest"}]})


def oll(script: dict[str, ProbeAnswer], wanted: str | None) -> tuple[ProbeFacts, list]:
    answers, sent = drive(ollama.exchange(), script)
    return ollama.read(answers, ProbeContext(wanted=wanted)), sent


def test_ollama_version_then_tags_and_ps() -> None:
    """/api/version, then /api/tags (listed) and /api/ps (resident, short timeout); GETs only."""
    script = {"/api/version": ok({"version": "0.12.3"}), "/api/tags": TAGS, "/api/ps": PS}
    facts, sent = oll(script, "llama3.2")
    assert [str(r) for r in sent] == ["GET /api/version", "GET /api/tags", "GET /api/ps"]
    assert sent[2].max_timeout is not None and sent[2].max_timeout <= 1.0
    assert facts.health is Health.UP and facts.version == "0.12.3"
    assert facts.listed_models == ("llama3.2:latest",)
    assert facts.resident_models == ("llama3.2:latest",)
    assert facts.identity == "llama3.2:latest"


def test_ollama_ps_timeout_reads_loading() -> None:
    """/api/ps blocking past its short timeout → loading, not unreachable."""
    script = {"/api/version": ok({"version": "1"}), "/api/tags": TAGS, "/api/ps": TIMEOUT}
    facts, _ = oll(script, "llama3.2:latest")
    assert facts.health is Health.LOADING and facts.detail.startswith("loading model")


def test_ollama_not_pulled_and_not_resident() -> None:
    """A tag missing from /api/tags is 'not listed' on a healthy server (its lists are trusted)."""
    script = {"/api/version": ok({"version": "1"}), "/api/tags": TAGS, "/api/ps": ok({"models": []})}
    facts, _ = oll(script, "qwen3:8b")
    assert facts.health is Health.UP and facts.listed_models == ("llama3.2:latest",)
    assert facts.detail.startswith("model qwen3:8b is not listed by the server")
    facts, _ = oll(script, "llama3.2")
    assert facts.health is Health.UP and facts.identity is None
    assert facts.detail == "llama3.2 is pulled, not resident"


def test_ollama_version_failure_stops_there() -> None:
    """No /api/version answer → unreachable and nothing else is asked."""
    facts, sent = oll({}, "x")
    assert facts.health is Health.UNREACHABLE and len(sent) == 1


def test_ollama_load_unload_deep_requests() -> None:
    """Load/unload use /api/generate with an empty prompt; deep health /api/chat with keep_alive."""
    load = ollama.load_request("llama3.2", 1800.0)
    assert (load.method, load.path) == ("POST", "/api/generate")
    assert load.body == {"model": "llama3.2", "prompt": "", "stream": False, "keep_alive": 1800}
    assert ollama.unload_request("llama3.2").body["keep_alive"] == 0
    deep = ollama.deep_request("llama3.2", 90.5)
    assert (deep.path, deep.body["keep_alive"], deep.body["model"]) == ("/api/chat", 90.5, "llama3.2")
    assert ollama.keep_alive_value(float("inf")) == -1
    ok_, why = ollama.read_load(load, ok({"error": "model 'llama3.2' not found"}, status=404))
    assert not ok_ and "not found" in why


# ---------------------------------------------------------------- deep verdict


def test_deep_verdict_pass_and_fail() -> None:
    """200 passes with the token count; anything else fails with the server's reason."""
    req = llamacpp.deep_request("tiny")
    good = deep_verdict(req, ok({"usage": {"completion_tokens": 1}}))
    assert good.ok and "(1 token)" in good.detail
    bad = deep_verdict(req, ok({"error": {"message": "model not found"}}, status=404))
    assert not bad.ok and bad.detail.endswith("answered 404: model not found")


def test_probe_status_not_probed_is_refused() -> None:
    """A port outside the allowlist maps to the 'refused' status with the detail kept."""
    facts = ProbeFacts(health=Health.NOT_PROBED, detail="port 1 is outside allowed_ports")
    assert probe_status(facts) == (Status.REFUSED, "port 1 is outside allowed_ports")
    assert probe_status(None)[0] is Status.UNKNOWN


def test_ollama_not_pulled_still_reports_resident_models() -> None:
    """Whatever the verdict, resident models are reported (the planner unloads by them)."""
    script = {"/api/version": ok({"version": "1"}), "/api/tags": TAGS, "/api/ps": PS}
    facts, _ = oll(script, "qwen3:8b")
    assert facts.health is Health.UP
    assert facts.resident_models == ("llama3.2:latest",)
    assert facts.listed_models == ("llama3.2:latest",)


def test_ollama_failed_lists_are_unhealthy_not_empty() -> None:
    """/api/ps or /api/tags failing reads UNHEALTHY: an empty list there is no evidence."""
    failing = {"/api/version": ok({"version": "1"}), "/api/tags": TAGS,
               "/api/ps": ProbeAnswer(status=500, text="boom")}
    facts, _ = oll(failing, "llama3.2")
    assert facts.health is Health.UNHEALTHY
    no_tags = {"/api/version": ok({"version": "1"}), "/api/tags": ProbeAnswer(status=500)}
    assert oll(no_tags, "llama3.2")[0].health is Health.UNHEALTHY


@pytest.mark.parametrize("status", [404, 503])
def test_ollama_tags_answered_with_an_error_is_unhealthy(status: int) -> None:
    """Any /api/tags answer that is not 2xx reads UNHEALTHY: its body lists nothing we may trust."""
    script = {"/api/version": ok({"version": "1"}), "/api/tags": ProbeAnswer(status=status),
              "/api/ps": PS}
    assert oll(script, "llama3.2")[0].health is Health.UNHEALTHY


# ---------------------------------------------------------------- llama.cpp, settled

LAUNCH = ("/opt/llama-server", "--model", MODEL_PATH, "--host", "127.0.0.1", "--port", "8080",
          "--alias", "tiny")


def test_llamacpp_settled_asks_health_only_and_reads_its_launch() -> None:
    """Our settled server: GET /health only; listed alias and model path come from the launch."""
    facts, sent = llama(LLAMA_UP, wanted="tiny", settled=True, launch_argv=LAUNCH)
    full, _ = llama(LLAMA_UP, wanted="tiny", launch_argv=LAUNCH)
    assert sent == ["GET /health"]
    # what the launch says is what the server answers (§14 its build is asked, every pass,
    # only of a role that runs a Program)
    assert facts == attrs.evolve(full, version=None)


def test_llamacpp_settled_still_judges_health_and_the_alias() -> None:
    """Settled: 503 is loading, a launch with another alias is 'not listed', 404 asks in full."""
    loading = {"/health": ok({"error": "Loading model"}, status=503)}
    assert llama(loading, settled=True, launch_argv=LAUNCH)[0].health is Health.LOADING
    facts, _ = llama(LLAMA_UP, wanted="coder", settled=True, launch_argv=LAUNCH)
    assert (facts.health, facts.detail) == (Health.UNHEALTHY,
                                             "model coder is not listed by the server")
    old = dict(LLAMA_UP, **{"/health": ok("nope", status=404)})
    _, sent = llama(old, wanted="tiny", settled=True, launch_argv=LAUNCH)
    assert sent == ["GET /health", "GET /v1/models", "GET /props"]
