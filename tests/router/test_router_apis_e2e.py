"""Anthropic's Messages API and OpenAI's Responses API through the router, end to end (BEHAVIOUR §9).

The real daemon and router, a real llama-server (which answers
``/v1/messages``, streams included, ``/v1/messages/count_tokens`` and
``/v1/responses``), and the official clients: ``anthropic`` and ``openai``.
The role is on demand (the first request starts it) and has its own
``api_key_file``; the router has an ``api_keys_file``. What is asserted is what
the clients got, what the daemon's metrics counted, and the Anthropic-shaped
errors the ``anthropic`` client turns into its own exceptions.
"""

from __future__ import annotations

import hashlib

import anthropic
import pytest

from tests.e2e.conftest import free_port, http_get
from tests.support import roles
from tests.watch.test_watch_e2e import value

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "hi"}]


def test_anthropic_and_responses_clients_through_the_router(routed):
    """§9 ``messages.create`` (plain and streamed) and ``messages.count_tokens`` with the
    ``anthropic`` client, ``responses.create`` with ``openai``'s, against a real llama-server
    started on demand by the first request: each answered, each counted with its client's
    name and tokens; the role's own key goes upstream (its server refuses any other);
    an unknown model is the client's ``NotFoundError``, a wrong key its
    ``AuthenticationError``."""
    world, port = routed.world, free_port()
    keys = world.root / "keys"
    keys.write_text(f"alice:{hashlib.sha256(b'ka').hexdigest()}\n")
    role_key = world.root / "role.key"
    role_key.write_text("role-secret\n")
    routed.node(router=f", api_keys_file: {keys}")
    world.model()
    world.write("role-chat.yaml", roles.inference_spec(
        "chat", port, state="on-demand", serve=f"api_key_file: {role_key}"))
    daemon = routed.start()
    client = anthropic.Anthropic(base_url=routed.base_url, api_key="ka", max_retries=0,
                                 timeout=60)
    try:
        prompt, completion = _talk(routed, client, port)
    finally:
        client.close()
    fams = daemon.metrics()
    assert value(fams, "reconciler_router_client_requests", role="chat", key="alice") == 4
    assert value(fams, "reconciler_router_tokens", role="chat", key="alice",
                 kind="prompt") == prompt
    assert value(fams, "reconciler_router_tokens", role="chat", key="alice",
                 kind="completion") == completion


def _talk(routed, client, port: int) -> tuple[int, int]:
    """Every route with its client; the (prompt, completion) tokens the answers say."""

    message = client.messages.create(model="chat", max_tokens=4, messages=HI)
    assert message.type == "message" and message.content[0].type == "text"
    assert message.usage.output_tokens >= 1
    assert http_get(port, "/health")[0] == 200  # started on demand

    with client.messages.stream(model="tiny", max_tokens=4, messages=HI) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_delta" in events and final.usage.output_tokens >= 1

    counted = client.messages.count_tokens(model="chat", messages=HI)
    assert counted.input_tokens >= 1

    with routed.client("ka") as openai_client:
        answer = openai_client.responses.create(model="chat", input="hi", max_output_tokens=4)
    assert answer.status == "completed" and answer.usage.output_tokens >= 1

    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-9", max_tokens=4, messages=HI)
    assert missing.value.body["error"]["type"] == "not_found_error"
    with anthropic.Anthropic(base_url=routed.base_url, api_key="kb", max_retries=0) as other:
        with pytest.raises(anthropic.AuthenticationError):
            other.messages.create(model="chat", max_tokens=4, messages=HI)
    return (message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
            + final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
            + answer.usage.input_tokens,
            message.usage.output_tokens + final.usage.output_tokens + answer.usage.output_tokens)
