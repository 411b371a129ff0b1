"""``reconcile --once`` end to end with a real ``mlx_lm.server`` (BEHAVIOUR §1.1, §2, §3, §4).

The testbed (``bash testbed/setup_mlx.sh``) gives mlx-lm's own server on MLX's
Linux CPU backend and a tiny random llama model directory. Its Model document
is written the way an operator would: ``reconcile models add DIR``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import psutil
import pytest
import yaml

from tests.e2e.conftest import TESTBED, free_port, http_get, wait_for

pytestmark = [pytest.mark.mlx, pytest.mark.e2e]

MLX_SERVER = TESTBED / "bin" / "mlx_lm.server"
TINY_MLX = TESTBED / "models" / "tiny-mlx"
READY_WITHIN = 20.0  # seconds from the start to the first one-token completion


def _mlx_testbed_or_skip() -> None:
    if MLX_SERVER.exists() and (TINY_MLX / "model.safetensors").exists():
        return
    message = f"the real mlx-lm testbed is missing ({MLX_SERVER}): run `bash testbed/setup_mlx.sh`"
    if os.environ.get("CI"):
        pytest.fail(message)  # in CI a missing testbed is a broken build, not a skip
    pytest.skip(reason=message)


@pytest.fixture
def mlx_world(request):
    """A world whose NodeConfig knows mlx_lm.server and whose model came from `models add`."""
    _mlx_testbed_or_skip()  # before `world`, so a missing mlx testbed names itself
    world = request.getfixturevalue("world")
    world.node(mlx_program=MLX_SERVER)
    out = world.reconcile("models", "add", str(TINY_MLX), "--name", "tiny-mlx", "--format", "mlx",
                          "-o", str(world.manifests / "model-tiny-mlx.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    return world


def voice(world, port: int, *, state: str = "running", extra_args: str = "[]") -> None:
    world.write("role-voice.yaml", f"""\
    apiVersion: reconciler/v1
    kind: InferenceSpec
    metadata: {{name: voice}}
    spec:
      runtime: mlx-lm
      mode: managed
      model: tiny-mlx
      state: {state}
      serve: {{port: {port}, extra_args: {extra_args}}}
    """)


def converge(world, expect: int = 0) -> subprocess.CompletedProcess:
    out = world.reconcile("--once")
    assert out.returncode == expect, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def status(world) -> dict:
    out = world.reconcile("status", "voice", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["roles"][0]


def wait_running(world) -> dict:
    """Poll `reconcile status` until the role is running (its first one-token completion)."""
    rows: list[dict] = []

    def running() -> bool:
        rows.append(status(world))
        return rows[-1]["status"] == "running"

    assert wait_for(running, READY_WITHIN, interval=0.2), [(r["status"], r["detail"]) for r in rows]
    return rows[-1]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_models_add_hashes_the_directory_in_place(mlx_world):
    """`models add DIR` names the weights and tokenizer with their real sizes and digests."""
    doc = yaml.safe_load((mlx_world.manifests / "model-tiny-mlx.yaml").read_text())
    weights = (TINY_MLX / "model.safetensors").read_bytes()
    tokenizer = (TINY_MLX / "tokenizer.json").read_bytes()
    assert doc["kind"] == "Model" and doc["metadata"] == {"name": "tiny-mlx"}
    assert doc["spec"] == {
        "format": "mlx",
        "root": str(TINY_MLX),
        "shards": [{"path": "model.safetensors", "size": len(weights),
                    "sha256": hashlib.sha256(weights).hexdigest()}],
        "tokenizer": {"path": "tokenizer.json", "sha256": hashlib.sha256(tokenizer).hexdigest()},
    }
    # Without --format an unquantized directory is plain safetensors (mlx-lm serves both).
    other = mlx_world.root / "detected.yaml"
    out = mlx_world.reconcile("models", "add", str(TINY_MLX), "--name", "tiny-mlx", "-o", str(other))
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(other.read_text())["spec"]["format"] == "safetensors"
    assert mlx_world.reconcile("validate").returncode == 0
    verify = mlx_world.reconcile("models", "verify", "tiny-mlx", "--full")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_start_is_running_after_one_token_then_nothing_to_do(mlx_world):
    """A started server is running once it answers a completion; a second pass plans nothing."""
    port = free_port()
    voice(mlx_world, port)
    out = converge(mlx_world)
    assert f"+ start voice :{port} (missing)" in out.stdout, out.stdout
    pid = mlx_world.pid("voice")
    assert pid and alive(pid)
    assert psutil.Process(pid).cmdline()[-6:] == [
        "--model", str(TINY_MLX), "--host", "127.0.0.1", "--port", str(port)]
    row = wait_running(mlx_world)
    assert row["pid"] == pid and "one-token completion" in row["detail"], row

    again = converge(mlx_world)
    assert "No changes" in again.stdout, again.stdout
    assert mlx_world.pid("voice") == pid
    assert mlx_world.reconcile("plan", "--detailed-exitcode").returncode == 0

    deep = mlx_world.reconcile("health", "voice", "--deep")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert "pass: POST /v1/chat/completions answered 200" in deep.stdout, deep.stdout


def test_extra_args_edit_restarts_exactly_once(mlx_world):
    """Adding --max-tokens changes the launch: one restart, then in sync again."""
    port = free_port()
    voice(mlx_world, port)
    converge(mlx_world)
    first = mlx_world.pid("voice")
    wait_running(mlx_world)

    voice(mlx_world, port, extra_args='["--max-tokens", "8"]')
    out = converge(mlx_world)
    assert f"~ restart voice :{port} (spec_changed: max-tokens (none) → 8)" in out.stdout, out.stdout
    second = mlx_world.pid("voice")
    assert second != first and not alive(first)
    assert psutil.Process(second).cmdline()[-2:] == ["--max-tokens", "8"]
    wait_running(mlx_world)
    again = converge(mlx_world)
    assert "No changes" in again.stdout, again.stdout
    assert mlx_world.pid("voice") == second
    assert mlx_world.record("voice").restarts == 0  # an edit is not a crash


def test_state_stopped_stops_the_server(mlx_world):
    """state: stopped stops our server: the process is gone and the port closed."""
    port = free_port()
    voice(mlx_world, port)
    converge(mlx_world)
    pid = mlx_world.pid("voice")
    wait_running(mlx_world)

    voice(mlx_world, port, state="stopped")
    out = converge(mlx_world)
    assert f"- stop voice :{port} (state_stopped)" in out.stdout, out.stdout
    assert wait_for(lambda: not alive(pid), 5)
    assert http_get(port, "/health")[0] == 0
    again = converge(mlx_world)
    assert "No changes" in again.stdout, again.stdout
    assert mlx_world.pid("voice") is None and mlx_world.processes() == []
