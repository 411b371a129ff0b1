"""``make demo``: one real llama.cpp server, converged from manifests.

Writes a tiny GGUF model, describes it with ``reconcile models add``, writes
a NodeConfig and an InferenceSpec, then runs the commands an operator would:
``reconcile validate``, ``plan``, ``--once``, ``status``, one token from the
server, and ``--once`` again to show that a converged machine plans nothing.
The server keeps running afterwards, as it would under cron.

Everything lives in ``$RECONCILER_DEMO_DIR`` (default /var/tmp/reconciler-demo):
the server runs as uid 65534 (BEHAVIOUR §6), so its directories must be
reachable by that uid, which the checkout (often under /root) is not.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTBED = Path(os.environ.get("RECONCILER_TESTBED", "/opt/reconciler-testbed"))
DEMO = Path(os.environ.get("RECONCILER_DEMO_DIR", "/var/tmp/reconciler-demo"))
PORT = int(os.environ.get("RECONCILER_DEMO_PORT", "8090"))
RECONCILE = [sys.executable, "-m", "reconciler"]
NOBODY = 65534


def say(text: str) -> None:
    print(f"\n\033[1m{text}\033[0m", flush=True)


def run(*args: str, check: bool = True) -> int:
    shown = " ".join(shlex.quote(a) for a in args)
    print(f"$ reconcile {shown}", flush=True)
    code = subprocess.run([*RECONCILE, *args], cwd=DEMO).returncode
    if code not in (0, 2) and check:
        sys.exit(f"demo: 'reconcile {shown}' exited {code}")
    return code


def write_manifests(llama: Path) -> None:
    manifests = DEMO / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "node.yaml").write_text(textwrap.dedent(f"""\
        # yaml-language-server: $schema={REPO}/schemas/nodeconfig.schema.json
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata:
          name: demo-node
        spec:
          allowed_ports: {{from: 8000, to: 8999}}
          memory_budget: 2GiB
          serve_programs:
            llamacpp: {llama}
          run_as: {{uid: {NOBODY}, gid: {NOBODY}}}
          stop_grace: 3s
          restart: {{max_restarts: 5, base: 2s, cap: 60s, stable_after: 60s}}
        """))
    (manifests / "chat.yaml").write_text(textwrap.dedent(f"""\
        # yaml-language-server: $schema={REPO}/schemas/inferencespec.schema.json
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata:
          name: chat
        spec:
          runtime: llamacpp
          mode: managed
          model: tiny
          serve:
            port: {PORT}
            ctx: 512
            extra_args: ["--threads", "1"]
          memory:
            kv: 64MiB
        """))


def stop() -> int:
    """``make demo-stop``: the declarative way to stop a server: say so, then converge."""
    chat = DEMO / "manifests" / "chat.yaml"
    if not chat.exists():
        print("demo: nothing to stop (run `make demo` first)")
        return 0
    text = chat.read_text()
    if "state: stopped" not in text:
        chat.write_text(text.replace("  model: tiny\n", "  model: tiny\n  state: stopped\n"))
    os.environ["RECONCILER_STATE_DIR"] = str(DEMO / "state")
    say("state: stopped → converge")
    run("--once")
    run("status")
    return 0


def server() -> tuple[Path, str]:
    """The llama-server to run and where it came from (``testbed/demo_server.sh``'s line)."""
    line = os.environ.get("DEMO_LLAMA_SERVER", "")
    if line:
        path, _, origin = line.partition("\t")
        return Path(path), origin or "given"
    llama = TESTBED / "bin" / "llama-server"
    if not llama.exists():
        sys.exit(f"demo: {llama} is missing: run `make demo` (it finds or installs one)")
    return llama, "the testbed's compiled build"


def version(llama: Path) -> str:
    out = subprocess.run([str(llama), "--version"], capture_output=True, text=True, timeout=30)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("version")]
    return lines[0] if lines else "version unknown"


def main() -> int:
    if sys.argv[1:] == ["--stop"]:
        return stop()
    llama, origin = server()
    print(f"demo: llama-server {llama} ({origin}): {version(llama)}", flush=True)
    DEMO.mkdir(parents=True, exist_ok=True)
    os.chmod(DEMO, 0o755)
    models = DEMO / "models"
    models.mkdir(exist_ok=True)
    os.chmod(models, 0o755)

    say("1. A tiny model, written offline, and its Model manifest made by `reconcile models add`")
    gguf = models / "tiny.gguf"
    if not gguf.exists():
        subprocess.run([str(TESTBED / "venv" / "bin" / "python"),
                        str(REPO / "testbed" / "make_tiny_gguf.py"), str(gguf)], check=True)
    os.chmod(gguf, 0o644)
    (DEMO / "manifests").mkdir(exist_ok=True)
    run("models", "add", str(gguf), "--name", "tiny", "-o", "manifests/tiny-model.yaml")
    write_manifests(llama)  # (re)written each run: `make demo` after `make demo-stop` starts again

    state = DEMO / "state"
    os.environ["RECONCILER_STATE_DIR"] = str(state)
    say("2. Validate the manifests (what the CI of a manifests repo runs)")
    run("validate")
    say("3. Plan: what would change, and why")
    run("plan")
    say("4. Converge once (what cron runs)")
    code = run("--once", check=False)
    if code != 0:
        print(f"demo: reconcile --once exited {code}; the server log is under {state}/instances")
        return code
    say("5. Status")
    run("status")

    say("6. One token from the server the reconciler started")
    body = json.dumps({"model": "tiny", "max_tokens": 1, "stream": False,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/chat/completions", data=body,
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as answer:
        reply = json.load(answer)
    print(f"  200: completion_tokens={reply['usage']['completion_tokens']} "
          f"finish_reason={reply['choices'][0]['finish_reason']!r}")

    say("7. Converge again: a converged machine plans nothing")
    run("--once")
    say("8. The event log")
    run("events")

    print(textwrap.dedent(f"""
        The server keeps running, as it would under cron. Everything is in {DEMO}.
        Look around:   RECONCILER_STATE_DIR={state} {shlex.join(RECONCILE)} -f {DEMO}/manifests status
        Stop it:       make demo-stop   (sets `state: stopped` in manifests/chat.yaml and converges)
        """))
    if shutil.which("ss"):
        subprocess.run(["ss", "-ltnp", f"sport = :{PORT}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
