"""``reconcile status`` on a broken manifest set, and ``--html`` (§11), without real servers."""

from __future__ import annotations

import os

from reconciler import cli
from reconciler.core.desired import Mode, Runtime
from reconciler.core.exitcodes import Exit
from reconciler.core.observed import RoleRecord
from reconciler.core.observed import flat_record
from reconciler.state.store import Store

NODE = """\
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {name: n}
spec: {allowed_ports: {from: 20000, to: 29999}}
"""
BROKEN = """\
apiVersion: reconciler/v1
kind: InferenceSpec
metadata: {name: coder}
spec: {runtime: llamacpp, mode: managed, model: nope, serve: {port: "<script>x</script>"}}
"""


def test_broken_manifests_show_the_problems_then_what_is_recorded(tmp_path, capsys) -> None:
    """§11 ``status --html`` with broken manifests shows the problems, then what the store recorded."""
    manifests, state = tmp_path / "m", tmp_path / "state"
    manifests.mkdir()
    (manifests / "node.yaml").write_text(NODE)
    (manifests / "coder.yaml").write_text(BROKEN)
    with Store(state) as store:  # a server that ran once (its pid is long gone)
        store.put_role(flat_record(name="chat", instance_id="chat-1", runtime=Runtime.LLAMACPP,
                                  mode=Mode.MANAGED, port=20001, pid=2**22 - 3,
                                  create_time=1.0, reserved=123_000_000))
    page = tmp_path / "page.html"
    code = cli.main(["-f", str(manifests), "--state-dir", str(state), "status",
                     "--html", str(page)])
    out, err = capsys.readouterr()
    assert code == Exit.ERROR
    assert "coder.yaml:4: $.spec.serve.port" in err
    assert err.index("coder.yaml") < err.index("manifests invalid: showing the last recorded state")
    assert out.splitlines()[0].startswith("ROLE")
    (chat,) = [line for line in out.splitlines()[1:] if line.startswith("chat")]
    assert "123.0 MB" in chat and "nothing is planned while the manifests are invalid" in chat
    html = page.read_text()
    assert html.index("manifests invalid: showing the last recorded state") < html.index('id="roles"')
    assert 'data-role="chat"' in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "<script" not in html  # the file page has no script at all
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


def test_status_html_of_a_valid_set(tmp_path, capsys) -> None:
    """§11 ``status --html FILE`` of a valid set writes the page and exits 0."""
    manifests, state = tmp_path / "m", tmp_path / "state"
    manifests.mkdir()
    (manifests / "node.yaml").write_text(NODE)
    page = tmp_path / "page.html"
    code = cli.main(["-f", str(manifests), "--state-dir", str(state), "status", "--html",
                     str(page)])
    capsys.readouterr()
    assert code == Exit.OK
    assert "reconcile status --html" in page.read_text()
    bad = cli.main(["-f", str(manifests), "--state-dir", str(state), "status", "--html",
                    str(tmp_path / "no" / "such" / "dir.html")])
    assert bad == Exit.ERROR
    assert "cannot write" in capsys.readouterr().err


def test_the_status_table_escapes_control_characters(capsys) -> None:
    """§1.5 text never reaches a terminal raw: a detail holding ESC or C1 (recorded text, a
    server's words) is printed by ``status`` with those escaped."""
    from reconciler.commands import status

    status._print_table([{"role": "chat", "runtime": "llamacpp", "mode": "managed",
                          "status": "failed", "pid": None, "port": 8000, "restarts": 0,
                          "reserved_bytes": 0, "detail": "exit: \x1b[2J\x9b2J"}])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out
    assert out.splitlines()[1].endswith("exit: \\x1b[2J\\x9b2J")


def test_the_status_table_names_each_roles_program(capsys) -> None:
    """§14 `status` (the table, not only --json) has a PROGRAM column, name@version, once a
    role runs a Program ("-" for one on a path); without any, the columns stay as they were."""
    from reconciler.commands import status

    row = {"role": "chat", "runtime": "llamacpp", "mode": "managed", "status": "running",
           "pid": 7, "port": 8000, "restarts": 0, "reserved_bytes": 0, "detail": "ok"}
    status._print_table([{**row, "program": {"name": "llama-b11434", "version": "b11434"}},
                         {**row, "role": "other", "program": None}])
    head, chat, other = capsys.readouterr().out.splitlines()
    assert head.split()[:4] == ["ROLE", "RUNTIME", "PROGRAM", "MODE"]
    assert chat.split()[:3] == ["chat", "llamacpp", "llama-b11434@b11434"]
    assert other.split()[:3] == ["other", "llamacpp", "-"]
    status._print_table([{**row, "program": None}])
    assert "PROGRAM" not in capsys.readouterr().out
