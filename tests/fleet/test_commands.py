"""``reconcile fleet``, ``fleet --diff``, ``plan --offline`` and ``--node`` on the command line."""

from __future__ import annotations

import json
import subprocess

import pytest

from reconciler import cli
from tests.fleet.worlds import files, model, node, role


def write(folder, *docs) -> None:
    folder.mkdir(exist_ok=True)
    ((name, data),) = files(*docs)
    (folder / name).write_bytes(data)


def git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


NODES = (node("gpu-1", labels={"pool": "a"}), node("gpu-2", labels={"pool": "b"}), model())


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    return tmp_path


def commit(repo, *docs, message="c") -> None:
    write(repo / "manifests", *docs)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fleet_diff_names_exactly_the_changes_of_the_last_commit(repo, capsys) -> None:
    """fleet --diff HEAD~1: one line per node/role the commit changed; exit 2."""
    commit(repo, *NODES, role("coder", 8001, placement={"nodes": ["gpu-1"]}, ctx=4096),
           role("chat", 8002, ctx=4096))
    commit(repo, *NODES, role("coder", 8001, placement={"nodes": ["gpu-2"]}, ctx=4096),
           role("chat", 8002, ctx=8192))
    code, out, _ = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD~1")
    assert code == 2
    assert out.splitlines() == ["~ gpu-1 chat (ctx 4096 → 8192)", "- gpu-1 coder",
                                "~ gpu-2 chat (ctx 4096 → 8192)", "+ gpu-2 coder",
                                "4 changes on 2 nodes."]
    code, out, _ = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD")
    assert (code, out) == (0, "No changes on any node.\n")


def test_fleet_diff_reads_the_revision_not_the_working_tree(repo, capsys) -> None:
    """Uncommitted edits count on the checkout's side; REV's files come from git, untouched."""
    commit(repo, *NODES, role("coder", 8001))
    write(repo / "manifests", *NODES)  # the role deleted, not committed
    code, out, _ = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD", "--json")
    assert code == 2
    assert [(c["sign"], c["node"], c["role"]) for c in json.loads(out)["changes"]] == [
        ("-", "gpu-1", "coder"), ("-", "gpu-2", "coder")]
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True).stdout.strip() == "M manifests/fleet.yaml"


def test_fleet_diff_errors(repo, capsys) -> None:
    """An unknown revision, or invalid manifests at REV, exit 1 with a line saying so."""
    commit(repo, *NODES, {"apiVersion": "reconciler/v1", "kind": "Nope"})
    commit(repo, *NODES, role("coder", 8001))
    code, _, err = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "nope")
    assert code == 1 and "'nope' is not a commit" in err
    code, _, err = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD~1")
    assert code == 1 and "HEAD~1:" in err and "the manifests at HEAD~1 have 1 problem(s)" in err


def test_fleet_shows_every_node(tmp_path, capsys) -> None:
    """fleet --json lists each node with its roles and memory."""
    write(tmp_path / "m", *NODES, role("coder", 8001, placement={"nodes": ["gpu-2"]}))
    code, out, _ = run(capsys, "-f", str(tmp_path / "m"), "fleet", "--json")
    shown = json.loads(out)
    assert code == 0
    assert [(n["node"], [r["role"] for r in n["roles"]]) for n in shown["nodes"]] == [
        ("gpu-1", []), ("gpu-2", ["coder"])]


def test_plan_offline_for_a_node(tmp_path, capsys) -> None:
    """plan --node N --offline: that node's plan from scratch; --detailed-exitcode 2."""
    write(tmp_path / "m", *NODES, role("coder", 8001, placement={"nodes": ["gpu-2"]}))
    code, out, _ = run(capsys, "-f", str(tmp_path / "m"), "--node", "gpu-2", "plan", "--offline",
                       "--detailed-exitcode")
    assert code == 2 and out.startswith("+ start coder :8001 (missing)")
    code, out, _ = run(capsys, "-f", str(tmp_path / "m"), "plan", "--offline", "--node", "gpu-1",
                       "--detailed-exitcode")
    assert code == 0 and out.startswith("No changes. 0 unchanged.")


def test_a_node_not_in_the_fleet_says_so_and_exits_1(tmp_path, capsys, monkeypatch) -> None:
    """A node no NodeConfig names: one FILE:LINE line, nothing changed, exit 1."""
    write(tmp_path / "m", *NODES, role("coder", 8001))
    monkeypatch.setenv("RECONCILER_NODE", "gpu-9")
    code, _, err = run(capsys, "-f", str(tmp_path / "m"), "plan", "--offline")
    assert code == 1
    assert f"{tmp_path / 'm'}:0: $: no NodeConfig is named 'gpu-9' (--node or $RECONCILER_NODE)" \
        in err
    assert "reconcile: 1 manifest problem(s); nothing was changed" in err


def test_node_names_are_plain_tokens(tmp_path, capsys) -> None:
    """--node takes a plain token; anything else is a usage error (exit 1)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["--node", "../etc", "validate", str(tmp_path)])
    assert exited.value.code == 1 and "is not a node name" in capsys.readouterr().err


def test_start_names_where_a_role_placed_elsewhere_runs(tmp_path, capsys) -> None:
    """reconcile start of a role placed on another node says which node has it (exit 1)."""
    write(tmp_path / "m", *NODES, role("coder", 8001, placement={"nodes": ["gpu-2"]}))
    code, _, err = run(capsys, "-f", str(tmp_path / "m"), "--state-dir", str(tmp_path / "s"),
                       "--node", "gpu-1", "start", "coder")
    assert code == 1
    assert "no role 'coder' in the manifests for node 'gpu-1': it is placed on gpu-2" in err
    assert not (tmp_path / "s").exists()  # refused before any state was touched


def test_fleet_diff_reads_repository_files_at_the_revision(repo, capsys) -> None:
    """A role's chat-template file (BEHAVIOUR §1.4) is read at REV too: an edited template is
    a changed launch, an unchanged one is not; a symlink at REV is refused."""
    templated = role("chat", 8002)
    templated["spec"]["serve"]["extra_args"] = ["--chat-template-file", "t/chat.jinja"]
    (repo / "manifests").mkdir()
    (repo / "manifests" / "t").mkdir()
    (repo / "manifests" / "t" / "chat.jinja").write_text("one")
    commit(repo, *NODES, templated)
    code, out, _ = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD")
    assert (code, out) == (0, "No changes on any node.\n")
    (repo / "manifests" / "t" / "chat.jinja").write_text("two")
    code, out, _ = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD")
    assert code == 2 and "chat" in out, out
    (repo / "manifests" / "t" / "chat.jinja").unlink()
    (repo / "manifests" / "t" / "chat.jinja").symlink_to("/etc/hostname")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")
    (repo / "manifests" / "t" / "chat.jinja").unlink()
    (repo / "manifests" / "t" / "chat.jinja").write_text("two")
    code, _, err = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD")
    assert code == 1 and "a symlink at HEAD" in err, err


def test_fleet_diff_never_prints_a_manifest_control_character_raw(repo, capsys) -> None:
    """§1.5 text from a manifest never reaches a terminal raw: an ESC sequence in a role's
    ``spec.env`` and a C1 CSI in an alias are refused (``FILE:LINE: $.path``, exit 1), and
    nothing ``fleet --diff`` writes holds ESC or C1 raw (it printed ``033 [ 2 J``)."""
    commit(repo, *NODES, role("chat", 8002))
    hostile = role("chat", 8002)
    hostile["spec"]["env"] = {"GGML_SCHED": "\x1b[2J"}
    hostile["spec"]["aliases"] = ["gpt\x9b4"]
    write(repo / "manifests", *NODES, hostile)
    code, out, err = run(capsys, "-f", str(repo / "manifests"), "fleet", "--diff", "HEAD")
    assert code == 1
    assert "$.spec.env.GGML_SCHED: the value of GGML_SCHED must be text without control" in err
    assert "$.spec.aliases[0]: an alias is text without control characters" in err
    assert not any(c in out + err for c in "\x1b\x9b"), (out, err)
    assert "'\\x1b[2J'" in err and "'gpt\\x9b4'" in err


def test_what_a_command_prints_has_its_control_characters_escaped(capsys) -> None:
    """§1.5 escape wherever printed: the text and JSON a command prints (fleet --diff, plan,
    status, fleet go through ``print_text``/``print_json``) carry C0, DEL and C1 escaped,
    whatever reached them; the JSON is still the same value."""
    from reconciler.commands import common
    from reconciler.fleet import fleetdiff

    change = fleetdiff.Change(node="gpu-1", role="chat", sign="~",
                              detail="env A=\x1b[2J → A=\x9b2J\x7f, aliases a → b\tc")
    common.print_text(fleetdiff.text([change]))
    common.print_json(fleetdiff.as_json([change]), ensure_ascii=False)
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x9b\x7f\t"), out
    text, _, document = out.partition("1 change on 1 node.\n")
    assert text == "~ gpu-1 chat (env A=\\x1b[2J → A=\\x9b2J\\x7f, aliases a → b\\tc)\n"
    assert json.loads(document)["changes"][0]["detail"] == change.detail
