"""The ``openai`` runtime: scripted answers, then the REAL llama.cpp and mlx-lm servers as
foreign OpenAI-compatible servers (adopted, GETs only, deep health on request)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from reconciler.commands.health import deep_check
from reconciler.core.decisions import Status
from reconciler.core.desired import Desired, Mode, ModelFormat, RoleSpec, Runtime, ServeSpec
from reconciler.core.observed import Health, ProbeFacts, Remembered
from reconciler.world.observe import observe
from reconciler.runtimes import openai, spec_of
from reconciler.runtimes.common import ErrorKind, ProbeAnswer, ProbeContext, probe_status
from tests.observe.scripted import REFUSED, TIMEOUT, drive, ok
from tests.observe.test_llamacpp_real import LLAMA_SERVER, TINY_GGUF, Launcher
from tests.observe.test_mlx_real import MLX_SERVER, TINY_MLX, Mlx

UP = {
    "/health": ok({"status": "ok"}),
    "/v1/models": ok({"object": "list", "data": [{"id": "tiny", "object": "model"}]}),
}


def read(script: dict[str, ProbeAnswer], **ctx: object) -> tuple[ProbeFacts, list[str]]:
    context = ProbeContext(adopted=True, **ctx)  # type: ignore[arg-type]
    answers, sent = drive(openai.exchange(context), script)
    return openai.read(answers, context), [str(r) for r in sent]


def test_declaration_is_observe_only() -> None:
    """Never launched or managed, no shared endpoint, no flags, any Model format."""
    rt = spec_of(Runtime.OPENAI)
    assert not (rt.launched or rt.managed or rt.shared_endpoint or rt.loads_models)
    assert rt.argv is None and rt.flags == {} and rt.readiness is None
    assert rt.default_port is None and rt.formats == frozenset(ModelFormat)


def test_up_lists_the_wanted_model() -> None:
    """/health 200, then /v1/models: the wanted Model name is listed → up, identity = its id."""
    facts, sent = read(UP, wanted="tiny")
    assert sent == ["GET /health", "GET /v1/models"]
    assert (facts.health, facts.detail) == (Health.UP, "healthy; serving tiny")
    assert facts.listed_models == ("tiny",) and facts.identity == "tiny"
    assert probe_status(facts) == (Status.RUNNING, "healthy; serving tiny")


def test_health_404_falls_back_to_models() -> None:
    """No /health (404) is no failure: /v1/models answers for it — 200 up, 503 loading."""
    script = dict(UP, **{"/health": ok({"error": "not found"}, status=404)})
    facts, sent = read(script, wanted="tiny")
    assert sent == ["GET /health", "GET /v1/models"] and facts.health is Health.UP
    script["/v1/models"] = ok({"error": "loading"}, status=503)
    assert read(script, wanted="tiny")[0].health is Health.LOADING
    script["/v1/models"] = ok("nope", status=404)
    facts, _ = read(script)
    assert (facts.health, facts.detail) == (Health.UNHEALTHY, "GET /v1/models answered 404")


def test_health_503_is_loading_and_asks_nothing_more() -> None:
    """503 on /health (vLLM, TGI, SGLang while loading) → loading; /v1/models is not asked."""
    facts, sent = read({"/health": ok({"error": "loading"}, status=503)}, wanted="tiny")
    assert (facts.health, facts.detail, sent) == (Health.LOADING, "loading model", ["GET /health"])


def test_wanted_model_missing_or_unlistable_is_unhealthy() -> None:
    """Answering without the wanted model, or refusing to list (401): unhealthy, with why."""
    facts, _ = read(UP, wanted="coder")
    assert (facts.health, facts.detail) == (
        Health.UNHEALTHY, "model coder is not listed by the server")
    locked = dict(UP, **{"/v1/models": ok({"error": {"message": "no key"}}, status=401)})
    facts, _ = read(locked, wanted="tiny")
    assert facts.health is Health.UNHEALTHY
    assert facts.detail == "cannot list models: GET /v1/models answered 401: no key"
    facts, _ = read(locked)  # no Model named: /health alone says up
    assert (facts.health, facts.detail, facts.identity) == (Health.UP, "healthy", None)


def test_path_like_ids_match_by_last_segment() -> None:
    """vLLM and mlx-lm list a path: the Model name matches its last segment, case-insensitively."""
    listing = ok({"data": [{"id": "/models/Qwen2.5-0.5B-Instruct"}, {"id": "other"}]})
    facts, _ = read(dict(UP, **{"/v1/models": listing}), wanted="qwen2.5-0.5b")
    assert facts.health is Health.UP and facts.identity == "/models/Qwen2.5-0.5B-Instruct"
    facts, _ = read(dict(UP, **{"/v1/models": listing}))
    assert facts.identity is None  # two listed, none wanted: no single identity


@pytest.mark.parametrize(
    ("answer", "detail"),
    [(REFUSED, "not listening (connection refused)"),
     (TIMEOUT, "no answer to GET /health within 1s"),
     (ProbeAnswer(error=ErrorKind.TOO_LARGE), "GET /health: answer larger than 1 MiB")],
)
def test_unreachable_is_unknown_not_starting(answer: ProbeAnswer, detail: str) -> None:
    """A foreign server that does not answer is unknown (never 'starting': we start nothing)."""
    facts, sent = read({"/health": answer}, wanted="tiny")
    assert (facts.health, facts.detail, sent) == (Health.UNREACHABLE, detail, ["GET /health"])
    assert probe_status(facts)[0] is Status.UNKNOWN


def test_deep_request_names_the_listed_id() -> None:
    """Deep health: one-token chat naming the id the server listed for the Model; else no model."""
    rt = spec_of(Runtime.OPENAI)
    role = RoleSpec(name="ext", runtime=Runtime.OPENAI, mode=Mode.ADOPTED, model="tiny-mlx",
                    serve=ServeSpec(port=8000))
    request = rt.deep_request(role, None, Desired().node, ("/opt/m/tiny-mlx", "x"))
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.body == {"model": "/opt/m/tiny-mlx", "max_tokens": 1, "stream": False,
                            "messages": [{"role": "user", "content": "hi"}]}
    assert rt.deep_request(role, None, Desired().node, ()).body["model"] == "tiny-mlx"
    anonymous = RoleSpec(name="ext", runtime=Runtime.OPENAI, mode=Mode.ADOPTED,
                         serve=ServeSpec(port=8000))
    assert "model" not in rt.deep_request(anonymous, None, Desired().node, ("a",)).body


# ---------------------------------------------------------------- the real servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _role(port: int, model: str | None) -> RoleSpec:
    return RoleSpec(name="ext", runtime=Runtime.OPENAI, mode=Mode.ADOPTED, model=model,
                    serve=ServeSpec(port=port))


def _until_up(role: RoleSpec, alive) -> ProbeFacts:  # type: ignore[no-untyped-def]
    deadline, seen = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        facts = observe(Desired(roles=(role,)), Remembered(), probe_timeout=1.0).role("ext").probe
        assert facts is not None
        seen.append((facts.health, facts.detail))
        if facts.health is Health.UP:
            return facts
        assert alive(), seen[-3:]
        time.sleep(0.05)
    raise AssertionError(f"never up: {seen[-3:]}")


@pytest.fixture
def llama() -> Iterator[Launcher]:
    made = Launcher()
    made.launch()
    try:
        yield made
    finally:
        made.close()


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("CI") and not (LLAMA_SERVER.exists() and TINY_GGUF.exists()),
                    reason=f"SKIPPED: real llama.cpp testbed missing ({LLAMA_SERVER}); "
                    "run `bash testbed/setup.sh`")
def test_real_llamacpp_as_an_openai_server(llama: Launcher) -> None:
    """A real llama-server adopted as `openai`: up with its alias listed; one-token deep health."""
    assert llama.proc is not None
    role = _until_up(_role(llama.port, "tiny"), lambda: llama.proc.poll() is None)
    assert role.detail == "healthy; serving tiny" and role.identity == "tiny"
    wrong = observe(Desired(roles=(_role(llama.port, "coder"),)), Remembered()).role("ext").probe
    assert wrong is not None and wrong.health is Health.UNHEALTHY
    assert wrong.detail == "model coder is not listed by the server"
    verdict = deep_check(_role(llama.port, "tiny"), Desired(roles=(_role(llama.port, "tiny"),)),
                         role.listed_models)
    assert verdict.ok and "(1 token)" in verdict.detail, verdict.detail


@pytest.fixture
def mlx(tmp_path: Path) -> Iterator[Mlx]:
    made = Mlx(_free_port(), tmp_path / "server.log")
    try:
        yield made
    finally:
        made.close()


@pytest.mark.mlx
@pytest.mark.skipif(not os.environ.get("CI") and not (MLX_SERVER.exists() and TINY_MLX.exists()),
                    reason=f"SKIPPED: real mlx-lm testbed missing ({MLX_SERVER}); "
                    "run `bash testbed/setup_mlx.sh`")
def test_real_mlx_as_an_openai_server(mlx: Mlx) -> None:
    """A real mlx_lm.server adopted as `openai`: its model path listed, matched by the Model
    name; deep health names that listed id (the model it already serves)."""
    role = _until_up(_role(mlx.port, "tiny-mlx"), lambda: mlx.proc.poll() is None)
    assert role.identity == str(TINY_MLX) and str(TINY_MLX) in role.listed_models
    spec = _role(mlx.port, "tiny-mlx")
    verdict = deep_check(spec, Desired(roles=(spec,)), role.listed_models)
    assert verdict.ok and "(1 token)" in verdict.detail, (verdict.detail,
                                                          mlx.log.read_text()[-2000:])
