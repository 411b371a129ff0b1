"""§13 ``reconcile fleet --rollout [--at TIME]``: every node's turn, from the manifests alone."""

from __future__ import annotations

import json

from reconciler import cli
from reconciler.fleet import rolloutview
from reconciler.manifests import loader
from reconciler.manifests.rolloutdoc import parse_time
from reconciler.planner.rollout import GateAnswer
from tests.fleet.worlds import files, model, node, role

ROLLOUT = {"apiVersion": "reconciler/v1", "kind": "Rollout", "metadata": {"name": "up"},
           "spec": {"start": "2026-12-02T14:00:00Z", "duration": "2h", "roles": ["coder"],
                    "waves": [{"name": "canary", "canary": True,
                               "node_selector": {"match_labels": {"ring": "canary"}}}],
                    "gate": {"prometheus": {"url": "http://prom:9090", "query": "up"}}}}
DOCS = (node("gpu-1", labels={"ring": "canary"}),
        node("gpu-2", labels={"reconciler.io/rollout-position": "0.5"}),
        node("gpu-3", labels={"reconciler.io/rollout-position": "0.25"}),
        node("gpu-4"), model(), role("coder", 8001), role("chat", 8002, placement={"nodes": ["gpu-4"]}),
        ROLLOUT)


def run(capsys, tmp_path, *argv: str) -> tuple[int, str, str]:
    ((name, data),) = files(*DOCS)
    (tmp_path / name).write_bytes(data)
    code = cli.main(["-f", str(tmp_path), "fleet", "--rollout", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_schedule_at_a_moment_offline(capsys, tmp_path) -> None:
    """Per wave: when it opens, its nodes by moment, moved or waiting and why; the gate of
    a later wave is not asked offline, so its nodes hold even past their moment."""
    code, out, _ = run(capsys, tmp_path, "--at", "2026-12-02T15:40:00Z")
    assert code == 0
    assert out.splitlines() == [
        "Rollout up: 14:00Z → 16:00Z (2h), 1 role (coder), at 15:40Z",
        "  gate: prometheus http://prom:9090",
        "  wave canary  opens 14:00Z  1 node, 1 moved",
        "    gpu-1  14:00Z  moved",
        "  wave rest  opens 15:00Z  3 nodes, 0 moved  gate unknown: not asked (offline)",
        "    gpu-3  15:15Z  waits: wave rest: gate unknown: not asked (offline)",
        "    gpu-2  15:30Z  waits: wave rest: gate unknown: not asked (offline)",
        "    gpu-4  15:52:10Z  waits: wave rest is moving; this node moves at 15:52:10Z",
    ]  # gpu-4 has no position label: the SHA-256 of its name places it


def test_json_with_gates_answered(tmp_path) -> None:
    """With the gate open for wave rest, the nodes past their moment have moved; the JSON
    names each node's roles the rollout stages (chat on gpu-4 is not staged)."""
    fleet = loader.load(files(*DOCS)).fleet
    shown = rolloutview.view(fleet, parse_time("2026-12-02T15:40:00Z"),
                             {("up", "rest"): GateAnswer(open=True, reason="healthy")})
    got = json.loads(json.dumps(rolloutview.as_json(shown)))
    rest = got["rollouts"][0]["waves"][1]
    assert rest["gate"] == {"open": True, "reason": "healthy"}
    assert [(n["node"], n["moves"], n["roles"]) for n in rest["nodes"]][:2] == [
        ("gpu-3", True, ["coder"]), ("gpu-2", True, ["coder"])]
    assert got["rollouts"][0]["waves"][0]["gate"] is None


def test_a_paused_rollout_says_so_and_nobody_moves(tmp_path) -> None:
    """paused: true → PAUSED on the rollout's line, every node waits with reason paused."""
    paused = {**ROLLOUT, "spec": {**ROLLOUT["spec"], "paused": True}}
    fleet = loader.load(files(*DOCS[:-1], paused)).fleet
    shown = rolloutview.view(fleet, parse_time("2026-12-03T00:00:00Z"))
    text = rolloutview.text(shown)
    assert text.splitlines()[0].endswith("PAUSED")
    assert "moved" not in text.replace("0 moved", "")
    assert text.count("waits: paused (Rollout up)") == 4


def test_a_bad_time_and_misused_flags_are_errors(capsys, tmp_path) -> None:
    """--at must be an RFC 3339 time; --at without --rollout is a usage error (exit 1)."""
    code, _, err = run(capsys, tmp_path, "--at", "tomorrow")
    assert code == 1 and "is not an RFC 3339 time" in err
    code = cli.main(["-f", str(tmp_path), "fleet", "--at", "2026-12-02T15:40:00Z"])
    assert code == 1 and "--at and --ask-gates go with --rollout" in capsys.readouterr().err


def test_without_a_rollout_document_it_says_changes_are_not_staged(capsys, tmp_path) -> None:
    """No Rollout: one line saying every change reaches every node at its next pass."""
    ((name, data),) = files(*DOCS[:-1])
    (tmp_path / name).write_bytes(data)
    assert cli.main(["-f", str(tmp_path), "fleet", "--rollout"]) == 0
    assert capsys.readouterr().out == (
        "No Rollout document: every change reaches every node at its next pass.\n")


def test_the_gates_are_asked_about_the_earlier_waves_nodes(capsys, tmp_path) -> None:
    """--ask-gates: each later wave's gate gets one instant query naming the nodes of the
    waves before it that run a staged role (gpu-1, the canary); its answer is shown and
    the nodes past their moment move."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    asked: list[str] = []

    class Prometheus(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            query = parse_qs(urlsplit(self.path).query)["query"][0]
            asked.append(query)
            result = [{"metric": {}, "value": [1, "1"]}] if 'n=~"gpu-1"' in query else []
            body = json.dumps({"status": "success",
                               "data": {"resultType": "vector", "result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gated = {**ROLLOUT, "spec": {**ROLLOUT["spec"], "gate": {"prometheus": {
            "url": f"http://127.0.0.1:{server.server_address[1]}", "query": 'h{n=~"$nodes"}'}}}}
        ((name, data),) = files(*DOCS[:-1], gated)
        (tmp_path / name).write_bytes(data)
        code = cli.main(["-f", str(tmp_path), "fleet", "--rollout", "--ask-gates",
                         "--at", "2026-12-02T15:40:00Z"])
        out = capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0 and asked == ['h{n=~"gpu-1"}']
    assert "  wave rest  opens 15:00Z  3 nodes, 2 moved  gate open: 1 sample healthy" in out
    assert "    gpu-3  15:15Z  moved" in out.splitlines()
