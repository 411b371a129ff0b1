"""Flags end to end with the real llama-server (BEHAVIOUR §1.4): a repository chat template,
``-ot`` with a regular expression, different K and V cache types, a LoRA adapter Model and
``spec.serve.api_key_file``."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import NOBODY, free_port, http_get, wait_for
from tests.e2e.test_once import converge, ready
from tests.support import roles

pytestmark = pytest.mark.e2e

TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
            "{% endfor %}assistant:")


def role(world, name: str, port: int, serve: str) -> None:
    world.write(f"role-{name}.yaml", roles.inference_spec(name, port, extra_args=None, serve=serve))


def up(world, port: int, name: str = "chat") -> None:
    """Ready, or fail with the server's own log."""
    if not ready(port):
        log = world.reconcile("logs", name)
        pytest.fail(f"{name} not ready:\n{log.stdout[-3000:]}{log.stderr[-2000:]}")


def cmdline(world, name: str) -> list[str]:
    pid = world.pid(name)
    assert pid, f"{name} has no pid"
    return psutil.Process(pid).cmdline()


def post(port: int, path: str, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(), headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_template_file_regex_override_and_different_cache_types(world):
    """The server reads a copy of the repository template; an edit restarts it once; -ot
    carries a regex; -ctk and -ctv differ."""
    port = free_port()
    world.node()
    world.model()
    (world.manifests / "templates").mkdir()
    template = world.manifests / "templates" / "chat.jinja"
    template.write_text(TEMPLATE)
    role(world, "chat", port, r"""cache_type_k: f32, cache_type_v: f16,
        extra_args: [--threads, "1", --jinja, --chat-template-file, templates/chat.jinja,
                     -ot, 'blk\.[0-9]+\.ffn_.*=CPU']""")
    converge(world)
    up(world, port)
    argv = cmdline(world, "chat")
    copy = f"files/{hashlib.sha256(TEMPLATE.encode()).hexdigest()[:16]}-chat.jinja"
    assert argv[argv.index("--chat-template-file") + 1] == copy
    assert argv[argv.index("-ot") + 1] == r"blk\.[0-9]+\.ffn_.*=CPU"
    assert (argv[argv.index("--cache-type-k") + 1], argv[argv.index("--cache-type-v") + 1]) \
        == ("f32", "f16")  # (the tiny model's 16-wide heads take no q8_0 blocks)
    status, body = http_get(port, "/props")
    assert status == 200 and json.loads(body)["chat_template"] == TEMPLATE
    cwd = Path(psutil.Process(world.pid("chat")).cwd())
    assert (cwd / copy).read_text() == TEMPLATE
    status, answer = post(port, "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert status == 200 and answer["usage"]["completion_tokens"] == 1

    pid = world.pid("chat")
    assert "No changes" in converge(world).stdout  # unchanged file: nothing to do
    template.write_text(TEMPLATE + " ")
    out = converge(world)
    assert "restart chat" in out.stdout, out.stdout
    assert ready(port) and world.pid("chat") != pid
    assert json.loads(http_get(port, "/props")[1])["chat_template"] == TEMPLATE + " "
    assert "No changes" in converge(world).stdout


def write_lora(path: Path, rank: int = 4) -> None:
    """A tiny LoRA adapter for testbed/make_tiny_gguf.py's model (llama, n_embd 64, 2 blocks)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(rank))
    for block in range(2):
        for name in ("attn_q", "attn_v"):
            # numpy (rows, cols) = ggml (ne1, ne0): A is ne [n_in, r], B is ne [r, n_out]
            a = (rng.standard_normal((rank, 64)) * 0.01).astype(np.float32)
            b = (rng.standard_normal((64, rank)) * 0.01).astype(np.float32)
            writer.add_tensor(f"blk.{block}.{name}.weight.lora_a", a)
            writer.add_tensor(f"blk.{block}.{name}.weight.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_lora_adapter_is_a_verified_model(world):
    """spec.serve.loras names a Model; the server loads it with its scale; a changed adapter
    file is refused as unverified."""
    port = free_port()
    world.node()
    world.model()
    lora_dir = world.root / "lora"
    lora_dir.mkdir()
    os.chmod(lora_dir, 0o755)
    lora = lora_dir / "tiny-lora.gguf"
    write_lora(lora)
    os.chmod(lora, 0o644)
    data = lora.read_bytes()
    world.write("model-lora.yaml", f"""\
    apiVersion: reconciler/v1
    kind: Model
    metadata: {{name: tiny-lora}}
    spec:
      format: gguf
      root: {lora_dir}
      shards: [{{path: {lora.name}, size: {len(data)}, sha256: {hashlib.sha256(data).hexdigest()}}}]
    """)
    role(world, "chat", port, 'loras: [{model: tiny-lora, scale: 0.5}], slot_save: true, '
                              'extra_args: [--threads, "1"]')
    converge(world)
    up(world, port)
    argv = cmdline(world, "chat")
    assert argv[argv.index("--lora-scaled") + 1] == f"{lora}:0.5"
    status, body = http_get(port, "/lora-adapters")
    assert status == 200, body
    (adapter,) = json.loads(body)
    assert adapter["path"] == str(lora) and adapter["scale"] == pytest.approx(0.5)
    status, answer = post(port, "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert status == 200, answer
    # slot_save: the server saves slots into a directory of its own instance directory
    cwd = Path(psutil.Process(world.pid("chat")).cwd())
    assert argv[argv.index("--slot-save-path") + 1] == "slots"
    status, saved = post(port, "/slots/0?action=save", {"filename": "s0.bin"})
    assert status == 200, saved
    assert (cwd / "slots" / "s0.bin").stat().st_size > 0


def test_api_key_file_keeps_the_probes_in_and_keyless_clients_out(world):
    """The server wants the key from the node's file; the reconciler's probes still see it
    running; a request without the key through its own port gets 401; the key is in no
    plan, status or event."""
    port = free_port()
    world.node()
    world.model()
    key = world.root / "chat.key"
    key.write_text("# the role's key\nsup3r-s3cret\n")
    os.chown(key, NOBODY, NOBODY)
    os.chmod(key, 0o400)
    role(world, "chat", port, f'api_key_file: {key}, extra_args: [--threads, "1", --metrics]')
    out = converge(world)
    up(world, port)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert post(port, "/v1/chat/completions", body)[0] == 401
    assert post(port, "/v1/chat/completions", body, key="wrong")[0] == 401
    assert post(port, "/v1/chat/completions", body, key="sup3r-s3cret")[0] == 200
    assert wait_for(lambda: json.loads(world.reconcile("status", "--json").stdout)
                    ["roles"][0]["status"] == "running", 10)
    health = world.reconcile("health", "--deep", "chat")
    assert health.returncode == 0, health.stdout + health.stderr
    again = converge(world)
    seen = out.stdout + again.stdout + world.reconcile("status", "--json").stdout + health.stdout
    with world.store() as store:
        events = store.events("chat")
    assert events and "sup3r-s3cret" not in repr(events)
    assert "sup3r-s3cret" not in seen
    assert "No changes" in again.stdout

