"""``reconcile health`` and ``reconcile capabilities`` through the real command line."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from reconciler.world import capabilities
from reconciler.cli import main
from reconciler.commands.health import health_report
from reconciler.core.desired import (
    Desired,
    Mode,
    NodeConfig,
    PortRange,
    RoleSpec,
    RunAs,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Remembered
from tests.doubles.ollama import OllamaDouble
from tests.observe.servers import Scripted, Silent, free_port

NODE = """\
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {{name: node}}
spec:
  allowed_ports: {{from: {lo}, to: {hi}}}
  keep_alive: 30m
  probe_timeout: 1s
  deep_timeout: 5s
{extra}"""

OLLAMA_ROLE = """\
apiVersion: reconciler/v1
kind: Model
metadata: {{name: small}}
spec:
  format: ollama
  source: {{ollama_tag: "llama3.2:1b"}}
---
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {{name: chat}}
spec:
  runtime: ollama
  mode: adopted
  model: small
  keep_alive: 10m
  serve: {{port: {port}}}
"""

LLAMA_ROLE = """\
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {{name: coder}}
spec:
  runtime: llamacpp
  mode: adopted
  serve: {{port: {port}}}
"""


def write(tmp_path: Path, *docs: str) -> list[str]:
    mdir = tmp_path / "manifests"
    mdir.mkdir(exist_ok=True)
    for i, doc in enumerate(docs):
        (mdir / f"{i}.yaml").write_text(doc)
    return ["-f", str(mdir), "--state-dir", str(tmp_path / "state")]


def node(lo: int = 1024, hi: int = 65535, extra: str = "") -> str:
    return NODE.format(lo=lo, hi=hi, extra=textwrap.indent(extra, "  "))


def test_health_reports_ollama_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """health NAME: the probe report, exit 0 when up; adopted → only GETs without --deep."""
    with OllamaDouble(pulled=["llama3.2:1b"]) as o:
        args = write(tmp_path, node(), OLLAMA_ROLE.format(port=o.port))
        code = main([*args, "health", "chat", "--json"])
        methods = {m for m, _, _ in o.requests}
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["status"] == "running" and report["version"] == "0.12.3"
    assert report["listed_models"] == ["llama3.2:1b"]
    assert methods == {"GET"}


def test_health_deep_on_ollama_sends_chat_with_keep_alive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--deep: POST /api/chat with the tag and the desired keep_alive (10m = 600 s); exit 0."""
    with OllamaDouble(pulled=["llama3.2:1b"]) as o:
        args = write(tmp_path, node(), OLLAMA_ROLE.format(port=o.port))
        code = main([*args, "health", "chat", "--deep"])
        posts = [(p, b) for m, p, b in o.requests if m == "POST"]
    out = capsys.readouterr().out
    assert code == 0, out
    assert "deep" in out and "pass" in out
    assert len(posts) == 1
    path, body = posts[0]
    assert path == "/api/chat"
    assert body["model"] == "llama3.2:1b" and body["keep_alive"] == 600
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_health_deep_failure_exits_1_with_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deep request answered 500 fails: exit 1 and the server's reason."""
    routes = {
        "/health": (200, {"status": "ok"}),
        "/v1/models": (200, {"data": [{"id": "coder"}]}),
        "/props": (200, {"model_path": "/m/coder.gguf"}),
        "/v1/chat/completions": (500, {"error": {"message": "out of memory"}}),
    }
    with Scripted(routes) as server:
        args = write(tmp_path, node(), LLAMA_ROLE.format(port=server.port))
        code = main([*args, "health", "coder", "--deep"])
        deep = [b for m, p, b, _ in server.requests if m == "POST"]
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL: POST /v1/chat/completions answered 500: out of memory" in out
    assert deep == [{"model": "coder", "messages": [{"role": "user", "content": "hi"}],
                     "max_tokens": 1, "stream": False}]


def test_health_outside_allowlist_sends_nothing_even_deep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The allowlist holds for the operator's --deep too: zero connections, exit 1."""
    with Silent() as listener:
        port = listener.port
        args = write(tmp_path, node(lo=port + 1, hi=port + 2), LLAMA_ROLE.format(port=port))
        code = main([*args, "health", "coder", "--deep"])  # the loader refuses the port
        spec = RoleSpec(name="coder", runtime=Runtime.LLAMACPP, mode=Mode.ADOPTED,
                        serve=ServeSpec(port=port))
        desired = Desired(roles=(spec,), node=NodeConfig(
            allowed_ports=PortRange(start=port + 1, end=port + 2)))
        report = health_report(spec, desired, Remembered(), deep=True)
        assert listener.accepted() == 0
    assert code == 1
    assert "outside" in capsys.readouterr().err
    assert report["ok"] is False and report["health"] == "not-probed"
    assert "outside allowed_ports" in report["deep"]["detail"]


def test_health_unknown_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A role the manifests do not name is an error, not a probe."""
    args = write(tmp_path, node())
    assert main([*args, "health", "nope"]) == 1
    assert "no role 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------- capabilities


def script(path: Path, body: str, mode: int = 0o755) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return str(path)


NOBODY = RunAs(uid=65534, gid=65534)


@pytest.fixture
def bindir() -> Iterator[Path]:
    """A directory the unprivileged probe uid can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="reconciler-cap-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_check_program_rules(tmp_path: Path) -> None:
    """Absolute, existing, executable, not group/other writable: each failure says why."""
    good = script(tmp_path / "good", "exit 0")
    assert capabilities.check_program(good).ok
    loose = script(tmp_path / "loose", "exit 0", mode=0o775)
    assert "writable by group or others (mode 0775)" in capabilities.check_program(loose).why
    plain = script(tmp_path / "plain", "exit 0", mode=0o644)
    assert "not executable" in capabilities.check_program(plain).why  # root too: no x bit at all
    assert "does not exist" in capabilities.check_program(str(tmp_path / "none")).why
    assert "not an absolute path" in capabilities.check_program("llama-server").why
    assert "not configured" in capabilities.check_program(None).why


def test_version_probe_cleared_env_first_line(bindir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe runs with env={}; exit 0 passes and the first stdout line is the version."""
    monkeypatch.setenv("LEAK_ME", "secret")
    probe = script(bindir / "v", 'echo "v1.2 ${LEAK_ME:-clean} $(id -u)"; echo second')
    check = capabilities.run_version_probe([probe, "--version"], run_as=NOBODY)
    assert check.ok and check.version == "v1.2 clean 65534"  # and not as root


def test_version_probe_failures(bindir: Path) -> None:
    """Non-zero exit and a hang past the timeout both fail with the reason."""
    bad = script(bindir / "bad", "echo broken >&2; exit 3")
    assert capabilities.run_version_probe([bad], run_as=NOBODY).why.endswith("exited 3: broken")
    slow = script(bindir / "slow", "exec sleep 30")
    check = capabilities.run_version_probe([slow], timeout=0.3, run_as=NOBODY)
    assert not check.ok and "did not exit within 0.3s" in check.why


def test_version_probe_is_checked_like_a_serve_program(bindir: Path) -> None:
    """A writable probe program, or a root run without run_as, is refused: nothing runs."""
    marker = bindir / "ran"
    loose = script(bindir / "loose", f"touch {marker}", mode=0o777)
    assert "writable by group or others" in capabilities.run_version_probe([loose]).why
    good = script(bindir / "good", f"touch {marker}")
    if os.geteuid() == 0:
        assert "set run_as" in capabilities.run_version_probe([good]).why
    assert not marker.exists()


def test_capabilities_table(tmp_path: Path, bindir: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """The table: programs, versions, ok-or-why; an Ollama endpoint answering /api/version."""
    good = script(bindir / "llama-server", 'echo "version: 42 (abc)" >&2')
    loose = script(bindir / "mlx_lm.server", "exit 0", mode=0o777)
    extra = (
        f"serve_programs: {{llamacpp: {good}, mlx-lm: {loose}}}\n"
        f"version_probe: {{llamacpp: [{good}, --version]}}\n"
        "run_as: {uid: 65534, gid: 65534}\n"
    )
    with OllamaDouble() as o:
        args = write(tmp_path, node(extra=extra), OLLAMA_ROLE.format(port=o.port))
        code = main([*args, "capabilities", "--json"])
    rows = {r["runtime"]: r for r in json.loads(capsys.readouterr().out)["runtimes"]}
    assert code == 0  # no managed role needs the broken mlx-lm program
    assert rows["llamacpp"]["ok"] and rows["llamacpp"]["version"] == "version: 42 (abc)"
    assert not rows["mlx-lm"]["ok"] and "writable by group or others" in rows["mlx-lm"]["why"]
    assert rows["ollama"]["ok"] and rows["ollama"]["version"] == "0.12.3"


OPENAI_ROLE = """\
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {{name: ext}}
spec:
  runtime: openai
  mode: adopted
  serve: {{port: {port}}}
"""


def test_capabilities_lists_every_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every runtime gets a row: openai endpoints are probed with GETs; none named: never launched."""
    routes = {"/health": (200, {"status": "ok"}), "/v1/models": (200, {"data": [{"id": "x"}]})}
    with Scripted(routes) as server:
        args = write(tmp_path, node(), OPENAI_ROLE.format(port=server.port))
        assert main([*args, "capabilities", "--json"]) == 0
        methods = {method for method, *_ in server.requests}
    rows = {r["runtime"]: r for r in json.loads(capsys.readouterr().out)["runtimes"]}
    assert set(rows) == {str(r) for r in Runtime}
    assert rows["openai"]["ok"] and rows["openai"]["program"] == f"127.0.0.1:{server.port}"
    assert methods == {"GET"}
    assert rows["ollama"]["why"] == "no ollama role (never launched)"
    args = write(tmp_path, node(), OPENAI_ROLE.format(port=free_port()))
    assert main([*args, "capabilities"]) == 1  # a role's endpoint does not answer
    assert "openai" in capsys.readouterr().out


def test_capabilities_help_names_the_runtimes(capsys: pytest.CaptureFixture[str]) -> None:
    """`reconcile capabilities --help` names every runtime, openai included."""
    with pytest.raises(SystemExit):
        main(["capabilities", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(str(r) in out for r in Runtime)
