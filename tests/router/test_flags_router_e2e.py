"""Roles the flag tables made expressible, through the router (BEHAVIOUR §1.4, §9): an
embeddings server named by an alias with `/`, and a server that wants an API key."""

from __future__ import annotations

import os

import openai
import pytest

from tests.e2e.conftest import NOBODY, free_port, http_get, wait_for

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "hi"}]


def test_embeddings_by_alias_and_a_keyed_role_through_the_router(routed):
    """`embeddings.create` reaches an --embeddings role by its alias `Qwen/Qwen3-Embedding`;
    a role whose server wants a key answers through the router (which sends the role's key),
    never to a keyless client on its own port; /v1/models lists the alias."""
    world = routed.world
    emb_port, chat_port = free_port(), free_port()
    routed.node()
    world.model()
    key = world.root / "chat.key"
    key.write_text("r0le-key\n")
    os.chown(key, NOBODY, NOBODY)
    os.chmod(key, 0o400)
    world.write("role-emb.yaml", f"""\
    apiVersion: reconciler/v1
    kind: InferenceSpec
    metadata: {{name: emb}}
    spec:
      runtime: llamacpp
      mode: managed
      model: tiny
      aliases: [Qwen/Qwen3-Embedding]
      serve: {{port: {emb_port}, ctx: 512, extra_args: [--threads, "1", --embeddings, --pooling, mean]}}
    """)
    world.write("role-chat.yaml", f"""\
    apiVersion: reconciler/v1
    kind: InferenceSpec
    metadata: {{name: chat}}
    spec:
      runtime: llamacpp
      mode: managed
      model: tiny
      serve: {{port: {chat_port}, ctx: 512, api_key_file: {key}, extra_args: [--threads, "1"]}}
    """)
    routed.start()
    assert wait_for(lambda: http_get(emb_port, "/health")[0] == 200
                    and http_get(chat_port, "/health")[0] == 200, 30)
    client = routed.client()
    assert wait_for(lambda: {m.id: m.status for m in client.models.list().data}
                    == {"chat": "running", "emb": "running"}, 20)

    vectors = client.embeddings.create(model="Qwen/Qwen3-Embedding", input=["hi", "hello"])
    assert [len(d.embedding) for d in vectors.data] == [64, 64]
    listed = {m.id: m for m in client.models.list().data}
    assert "Qwen/Qwen3-Embedding" in listed["emb"].aliases

    answer = client.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    assert answer.usage.completion_tokens == 1
    direct = openai.OpenAI(base_url=f"http://127.0.0.1:{chat_port}/v1", api_key="none",
                           max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        direct.chat.completions.create(model="chat", messages=HI, max_tokens=1)
    assert "r0le-key" not in routed.daemon.log
