"""The router in front of the real ``mlx_lm.server`` (BEHAVIOUR §9), with the ``openai`` client."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import free_port
from tests.e2e.test_mlx_once import MLX_SERVER, TINY_MLX, _mlx_testbed_or_skip, voice

pytestmark = [pytest.mark.mlx, pytest.mark.e2e]

HI = [{"role": "user", "content": "hi"}]


def test_mlx_role_started_on_demand_answers_chat_and_streams(routed):
    """A cold on-demand mlx-lm role: the first chat starts it; non-streaming and SSE answered."""
    _mlx_testbed_or_skip()
    world = routed.world
    routed.node(mlx_program=MLX_SERVER)
    out = world.reconcile("models", "add", str(TINY_MLX), "--name", "tiny-mlx", "--format", "mlx",
                          "-o", str(world.manifests / "model-tiny-mlx.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    voice(world, free_port(), state="on-demand")
    daemon = routed.start()
    client = routed.client(timeout=120)

    answer = client.chat.completions.create(model="voice", messages=HI, max_tokens=2)
    assert answer.usage.completion_tokens >= 1, daemon.log
    chunks = list(client.chat.completions.create(model="tiny-mlx", messages=HI, max_tokens=3,
                                                 stream=True))
    assert chunks and any(c.choices and c.choices[0].finish_reason for c in chunks)
    assert [m.status for m in client.models.list().data] == ["running"]
    assert world.pid("voice") is not None
