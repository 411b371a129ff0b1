"""Ollama load/unload: only POST /api/generate, with the keep_alive Ollama understands (§2)."""

from __future__ import annotations

import math

import pytest

from reconciler.world import execute
from reconciler.runtimes import ollama as ollama_rt
from reconciler.core.decisions import Decision, Plan, Reason, Verb, flat
from reconciler.core.outcomes import Guard, Refusal
from reconciler.core.desired import NodeConfig, Runtime
from tests.doubles.ollama import OllamaDouble

TAG = "llama3.2:latest"
ROLE = "chat"
INSTANCE = "chat-0badcafe"


def _generate(tag: str, keep_alive) -> tuple[str, str, dict]:
    body = {"model": tag, "prompt": "", "stream": False, "keep_alive": keep_alive}
    return ("POST", "/api/generate", body)


@pytest.mark.parametrize("seconds,sent,remaining", [
    (1800.0, 1800, 1800.0),
    (90.4, 91, 91.0),  # a fraction rounds up, never down towards 0 (= unload)
    (0.2, 1, 1.0),
    (-1.0, -1, math.inf),
    (math.inf, -1, math.inf),
])
def test_load_posts_generate_with_keep_alive_in_whole_seconds(seconds, sent, remaining):
    """A load is one POST /api/generate with an empty prompt and keep_alive in whole seconds."""
    with OllamaDouble(pulled=[TAG]) as ollama:
        result = execute.load_model(ollama_rt.SPEC, "127.0.0.1", ollama.port, TAG, seconds, timeout=5.0)
        assert result.ok and result.status == 200, result
        assert ollama.requests == [_generate(TAG, sent)]
        assert ollama.resident() == [TAG]
        left = ollama.keep_alive_remaining(TAG)
        assert left == remaining if math.isinf(remaining) else remaining - 1 < left <= remaining


def test_unload_posts_generate_with_keep_alive_zero():
    """An unload is the same request with keep_alive 0, and the model leaves memory."""
    with OllamaDouble(pulled=[TAG]) as ollama:
        assert execute.load_model(ollama_rt.SPEC, "127.0.0.1", ollama.port, TAG, 60.0, timeout=5.0).ok
        result = execute.unload_model(ollama_rt.SPEC, "127.0.0.1", ollama.port, TAG, timeout=5.0)
        assert result.ok, result
        assert ollama.requests == [_generate(TAG, 60), _generate(TAG, 0)]
        assert ollama.resident() == []


def test_load_of_an_unpulled_model_fails_and_never_pulls():
    """A 404 is a failed load naming the tag; nothing but /api/generate is called (no pull)."""
    with OllamaDouble(pulled=[]) as ollama:
        result = execute.load_model(ollama_rt.SPEC, "127.0.0.1", ollama.port, TAG, 60.0, timeout=5.0)
        assert not result.ok and result.status == 404
        assert "not pulled" in result.error
        assert [path for _, path, _ in ollama.requests] == ["/api/generate"]


def test_keep_alive_zero_load_is_refused_without_a_request():
    """A load asking for keep_alive 0 would unload what it loads: refused, no packet."""
    with OllamaDouble(pulled=[TAG]) as ollama:
        result = execute.load_model(ollama_rt.SPEC, "127.0.0.1", ollama.port, TAG, 0.0, timeout=5.0)
        assert not result.ok and result.refusal.guard is Guard.KEEP_ALIVE_ZERO
        assert str(result.refusal) == "refused: keep_alive 0 would unload the model it loads"
        assert ollama.requests == []


def test_non_loopback_host_is_refused():
    """Ollama calls only ever go to loopback."""
    result = execute.load_model(ollama_rt.SPEC, "192.0.2.1", 11434, TAG, 60.0, timeout=5.0)
    assert not result.ok and result.refusal == Refusal(
        guard=Guard.NOT_LOOPBACK, detail="192.0.2.1 is not a loopback address")


def _decision(verb: Verb, port: int, **kw) -> Decision:
    return flat(role=ROLE, verb=verb, reason=Reason.MISSING, host="127.0.0.1", port=port,
                    instance_id=INSTANCE, model_tag=TAG, runtime=Runtime.OLLAMA, **kw)


def test_apply_loads_with_the_decided_keep_alive_and_unloads():
    """apply() turns LOAD/UNLOAD decisions into the two generate calls, in plan order."""
    with OllamaDouble(pulled=[TAG]) as ollama:
        plan = Plan(decisions=(
            _decision(Verb.LOAD, ollama.port, keep_alive=-1.0, reserve=5),
            _decision(Verb.UNLOAD, ollama.port),
            _decision(Verb.LOAD, ollama.port),  # no keep_alive: the NodeConfig default
        ))
        outcomes = execute.apply(plan, node=NodeConfig(keep_alive=600.0), allowed=lambda p: True)
        assert [o.ok for o in outcomes] == [True, True, True]
        assert ollama.requests == [_generate(TAG, -1), _generate(TAG, 0), _generate(TAG, 600)]


def test_apply_sends_nothing_to_a_port_outside_the_allowlist():
    """A LOAD on a disallowed port is refused before any connection."""
    with OllamaDouble(pulled=[TAG]) as ollama:
        plan = Plan(decisions=(_decision(Verb.LOAD, ollama.port, keep_alive=60.0),))
        (outcome,) = execute.apply(plan, node=NodeConfig(), allowed=lambda p: False)
        assert not outcome.ok and outcome.refusal.guard is Guard.PORT_NOT_ALLOWED
        assert "outside the allowed ports" in outcome.text()
        assert ollama.requests == []


def test_failed_unload_skips_a_load_that_counted_on_its_memory():
    """An unload that fails keeps its memory: a later reserving load is skipped, not sent."""
    with OllamaDouble(pulled=[TAG, "big:latest"]) as ollama:
        port = ollama.port
    # The double is stopped now: the unload is refused by the closed port.
    plan = Plan(decisions=(
        _decision(Verb.UNLOAD, port),
        flat(role="big", verb=Verb.LOAD, reason=Reason.MISSING, host="127.0.0.1", port=port,
                 instance_id="big-00000000", model_tag="big:latest", reserve=10,
                 runtime=Runtime.OLLAMA),
    ))
    unload, load = execute.apply(plan, node=NodeConfig(deep_timeout=2.0), allowed=lambda p: True)
    assert not unload.ok and not unload.skipped
    assert load.skipped and not load.ok
