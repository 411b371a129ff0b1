"""§4 generations end to end: a committed fix reaches a gave-up role; restarted_at restarts once."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.conftest import free_port, http_get, wait_for
from tests.e2e.test_once import alive, converge, executable, ready
from tests.support import roles

pytestmark = pytest.mark.e2e


def _role(world, name: str, port: int, *, kv_quant: str | None = None,
          restarted_at: str | None = None, ctx: int = 512) -> None:
    more = {"restarted_at": f'"{restarted_at}"'} if restarted_at else {}
    world.write(f"role-{name}.yaml", roles.inference_spec(
        name, port, ctx=ctx, serve=f"kv_quant: {kv_quant}" if kv_quant else "", **more))


def _git(world, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(world.manifests), *args], capture_output=True,
                         text=True, check=True,
                         env={"GIT_AUTHOR_NAME": "op", "GIT_AUTHOR_EMAIL": "op@example.org",
                              "GIT_COMMITTER_NAME": "op", "GIT_COMMITTER_EMAIL": "op@example.org",
                              "HOME": str(world.root), "PATH": "/usr/bin:/bin"})
    return out.stdout.strip()


def test_gave_up_role_runs_after_a_committed_fix(world):
    """kv_quant q8_0 (head dim 16) crashes to gave-up; the commit removing it starts it at once."""
    port = free_port()
    world.node(restart="{max_restarts: 0, base: 1s, cap: 8s, stable_after: 60s}")
    world.model()
    _role(world, "chat", port, kv_quant="q8_0")
    _git(world, "init", "-q")
    _git(world, "add", "-A")
    _git(world, "commit", "-q", "-m", "chat with a q8_0 cache")
    converge(world)  # started; llama-server then fails to load the model
    assert wait_for(lambda: world.pid("chat") is None or not alive(world.pid("chat")), 20)
    out = world.reconcile("--once")
    for _ in range(10):  # a pass may still see it starting; then it has exited
        if "gave-up" in out.stdout or "give-up" in out.stdout:
            break
        out = world.reconcile("--once")
    assert out.returncode == 3 and ("give-up chat" in out.stdout or "gave-up" in out.stdout), \
        out.stdout
    assert world.record("chat").terminal == "gave-up"
    out = converge(world, expect=3)
    assert "= keep chat" in out.stdout and "(terminal: gave-up)" in out.stdout, out.stdout

    _role(world, "chat", port)  # the fix
    _git(world, "commit", "-q", "-am", "chat: no quantised cache (head dim 16)")
    fixed = _git(world, "rev-parse", "HEAD")
    out = converge(world)
    assert f"+ start chat :{port} (spec_changed: kv_quant q8_0 → (none))" in out.stdout, out.stdout
    assert ready(port)
    record = world.record("chat")
    assert record.terminal is None and record.restarts == 0 and alive(record.pid)
    with world.store() as store:
        starts = [e for e in store.events() if e.role == "chat" and e.reason == "spec_changed"]
    assert [e.git_commit for e in starts] == [fixed]
    assert "No changes" in converge(world).stdout


def test_restarted_at_restarts_exactly_once(world):
    """A new restarted_at: one restart (not counted); the same value again: nothing."""
    port = free_port()
    world.node()
    world.model()
    _role(world, "chat", port)
    converge(world)
    assert ready(port)
    first = world.pid("chat")
    _role(world, "chat", port, restarted_at="2026-12-01T07:00Z")
    out = converge(world)
    assert f"~ restart chat :{port} (spec_changed: restarted_at (none) → 2026-12-01T07:00Z)" \
        in out.stdout, out.stdout
    assert ready(port)
    second = world.pid("chat")
    assert second != first and not alive(first) and world.record("chat").restarts == 0
    for _ in range(2):
        assert "No changes" in converge(world).stdout
    assert world.pid("chat") == second


def test_stopped_exposed_new_generation_holds_again_then_runs(world):
    """stopped-exposed: a new generation starts it; still exposed → held again; fixed → running."""
    from tests.e2e.conftest import LLAMA_SERVER

    bad = executable(world.root / "bin" / "exposing-llama-server", f"""\
        #!/bin/sh
        exec {LLAMA_SERVER} "$@" --host 0.0.0.0
        """)
    port = free_port()
    world.node(program=bad)
    world.model()
    _role(world, "chat", port)
    converge(world, expect=3)
    assert world.record("chat").terminal == "stopped-exposed"
    _role(world, "chat", port, ctx=1024)  # a new generation, still behind the bad launcher
    out = converge(world, expect=3)
    assert "+ start chat" in out.stdout and "reachable beyond loopback" in out.stdout, out.stdout
    assert world.record("chat").terminal == "stopped-exposed"
    assert http_get(port, "/health")[0] == 0 and world.processes() == []
    world.node()  # the real llama-server: another launch, another generation
    out = converge(world)
    assert "+ start chat" in out.stdout, out.stdout
    assert ready(port) and world.record("chat").terminal is None
