"""kind: Program (BEHAVIOUR §14): the document, the references to it, and the launch it gives."""

from __future__ import annotations

import textwrap

from reconciler.core.desired import Runtime
from reconciler.manifests import loader
from reconciler.planner import identity

A, B = "a" * 64, "b" * 64


def program(name: str = "llama-b11434", version: str = "b11434", sha: str = A,
            extra: str = "") -> str:
    return textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: Program
        metadata: {{name: {name}}}
        spec:
          runtime: llamacpp
          version: {version}
          root: /opt/llama
          entrypoint: bin/llama-server
          files:
            - {{path: bin/llama-server, size: 10, sha256: {sha}}}
            - {{path: lib/libggml.so, size: 5, sha256: {B}}}
        """) + extra


def world(serve: str = "llama-b11434", role_program: str | None = None,
          programs: str | None = None) -> str:
    own = f"  program: {role_program}\n" if role_program else ""
    return (programs if programs is not None else program()) + textwrap.dedent(f"""\
        ---
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: n}}
        spec:
          allowed_ports: {{from: 8000, to: 9000}}
          serve_programs: {{llamacpp: {serve}}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: m}}
        spec: {{format: gguf, root: /m, shards: [{{path: m.gguf, size: 1, sha256: {A}}}]}}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: chat}}
        spec:
          runtime: llamacpp
          mode: managed
          model: m
          serve: {{port: 8080}}
        """) + own


def load(text: str):
    return loader.load([("m.yaml", text.encode())])


def messages(result) -> list[str]:
    return [f"{p.line}: {p.path}: {p.message}" for p in result.problems]


def test_a_program_names_its_files_and_runs_its_entrypoint() -> None:
    """§14: serve_programs naming a Program runs <root>/<entrypoint>; the Program is the node's."""
    result = load(world())
    assert result.problems == () and result.warnings == ()
    desired = result.desired
    (p,) = desired.programs
    assert (p.name, p.runtime, p.version, p.executable) == (
        "llama-b11434", Runtime.LLAMACPP, "b11434", "/opt/llama/bin/llama-server")
    assert [f.path for f in p.files] == ["bin/llama-server", "lib/libggml.so"]
    assert desired.program_for(desired.role("chat")) == p
    launch = identity.launch(desired.role("chat"), {m.name: m for m in desired.models},
                             desired.node, {}, "/d", desired.programs)
    assert launch.argv[0] == "/opt/llama/bin/llama-server"
    assert dict(launch.env)[identity.PROGRAM_ENV] == f"llama-b11434 b11434 sha256:{p.digest[:16]}"


def test_a_new_program_at_the_same_path_is_a_new_launch() -> None:
    """§14/§4: another version or another digest of the same files is a new generation (the
    launch digest changes) though the path run is the same."""
    def digest(text: str) -> str:
        d = load(text).desired
        return identity.launch(d.role("chat"), {m.name: m for m in d.models}, d.node, {}, "/d",
                               d.programs).digest
    base = digest(world())
    assert digest(world(programs=program(sha=B))) != base
    assert digest(world(programs=program(version="b11500"))) != base
    assert digest(world()) == base


def test_a_path_is_accepted_and_warned_as_not_pinned() -> None:
    """§14: an absolute path stays accepted; validate warns at its line that it is not pinned
    (``unpinned``, apart from the set's other warnings: the path is still a valid setting)."""
    result = load(world(serve="/usr/local/bin/llama-server"))
    assert result.problems == () and result.warnings == ()
    (w,) = result.unpinned
    assert (w.line, w.path) == (18, "$.spec.serve_programs.llamacpp")
    assert w.message.startswith("/usr/local/bin/llama-server is not pinned")
    assert "reconcile programs add /usr/local/bin/llama-server" in w.message


def test_a_role_runs_its_own_program() -> None:
    """§14: spec.program wins over the node's serve_programs (a fork's build for one model)."""
    both = program() + "---\n" + program(name="fork", version="b9000", sha=B)
    result = load(world(role_program="fork", programs=both))
    assert result.problems == ()
    d = result.desired
    assert d.program_for(d.role("chat")).name == "fork"
    launch = identity.launch(d.role("chat"), {m.name: m for m in d.models}, d.node, {}, "/d",
                             d.programs)
    assert dict(launch.env)[identity.PROGRAM_ENV].startswith("fork b9000 ")


def test_unknown_program_and_wrong_runtime_are_problems() -> None:
    """§14: a name no document declares, or a Program of another runtime, is FILE:LINE: $.path."""
    assert messages(load(world(serve="nope"))) == [
        "18: $.spec.serve_programs.llamacpp: no Program named 'nope' (and not an absolute path)"]
    mlx = program().replace("runtime: llamacpp", "runtime: mlx-lm")
    assert messages(load(world(programs=mlx))) == [
        "18: $.spec.serve_programs.llamacpp: Program 'llama-b11434' serves mlx-lm, not llamacpp"]
    assert messages(load(world(role_program="ghost"))) == [
        "33: $.spec.program: no Program named 'ghost' (and not an absolute path)"]


def test_program_document_rules() -> None:
    """§14: the entrypoint is one of the files; files sorted and unique; root xor source; a
    source is a .zip/.tar.gz URL with its sha256 and size; http only to loopback."""
    bad_entry = program().replace("entrypoint: bin/llama-server", "entrypoint: llama-server")
    assert messages(load(bad_entry)) == [
        "8: $.spec.entrypoint: 'llama-server' is not one of spec.files: the executable is "
        "checked by its digest like every other file"]
    unsorted = program().replace("lib/libggml.so", "a/libggml.so")
    assert messages(load(unsorted)) == [
        "11: $.spec.files[1].path: files must be sorted by path: 'a/libggml.so' comes before "
        "'bin/llama-server'"]
    both = program(extra=f"  source: {{url: 'https://x.org/a.zip', sha256: {A}, size: 9}}\n")
    assert [m.split(": ", 2)[1] for m in messages(load(both))] == ["$.spec"]
    archive = program().replace("  root: /opt/llama\n", "")
    zip_ok = archive + f"  source: {{url: 'https://x.org/llama.zip', sha256: {A}, size: 9}}\n"
    assert load(zip_ok).problems == ()
    exe = archive + f"  source: {{url: 'https://x.org/llama.exe', sha256: {A}, size: 9}}\n"
    assert [m.split(": ", 2)[1] for m in messages(load(exe))] == ["$.spec.source.url"]
    http = archive + f"  source: {{url: 'http://10.0.0.1/l.tar.gz', sha256: {A}, size: 9}}\n"
    assert [m.split(": ", 2)[1] for m in messages(load(http))] == ["$.spec.source.url"]


def test_a_fetched_program_lives_in_the_cache_tree_on_a_node_that_fetches() -> None:
    """§14: a Program with a source has its root in the node's cache, one tree per file list;
    on a node that never fetches it has none, and its role cannot start (argv[0] not absolute)."""
    archive = program().replace("  root: /opt/llama\n", "") + (
        f"  source: {{url: 'https://x.org/llama.tar.gz', sha256: {A}, size: 9}}\n")
    fetching = world(programs=archive).replace(
        "allowed_ports: {from: 8000, to: 9000}",
        "allowed_ports: {from: 8000, to: 9000}\n  fetch: {cache: /var/cache/r}")
    d = load(fetching).desired
    (p,) = d.programs
    assert p.root == f"/var/cache/r/programs/llama-b11434/{p.digest[:16]}"
    d = load(world(programs=archive)).desired
    assert d.programs[0].root is None
    launch = identity.launch(d.role("chat"), {m.name: m for m in d.models}, d.node, {}, "/d",
                             d.programs)
    assert launch.argv[0] == "<Program llama-b11434 is not on this node>"


def test_validate_warns_that_a_path_is_not_pinned(tmp_path, capsys) -> None:
    """§14: `reconcile validate` exits 0 on a path and warns on stderr, FILE:LINE: $.path."""
    from reconciler.cli import main

    (tmp_path / "m.yaml").write_text(world(serve="/usr/local/bin/llama-server"))
    assert main(["validate", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"{tmp_path}/m.yaml:18: $.spec.serve_programs.llamacpp: warning: " \
           "/usr/local/bin/llama-server is not pinned" in err


def test_metrics_name_the_program_each_role_runs(tmp_path):
    """§14 reconciler_program_info{node,role,program,version,sha256} = 1 for each managed role
    that runs a Program; a role on a path has none."""
    from prometheus_client.parser import text_string_to_metric_families

    from reconciler.engine.loop import PassResult
    from reconciler.report import metrics
    from reconciler.state.store import Store

    d = load(world()).desired
    with Store(tmp_path / "state") as store:
        text = metrics.render_result(PassResult(desired=d), store)
        family = next(f for f in text_string_to_metric_families(text)
                      if f.name == "reconciler_program_info")
        assert [(s.labels, s.value) for s in family.samples] == [
            ({"node": "n", "role": "chat", "program": "llama-b11434", "version": "b11434",
              "sha256": d.programs[0].digest}, 1.0)]
        text = metrics.render_result(PassResult(desired=load(world(serve="/x")).desired),
                                     store)
        assert "reconciler_program_info{" not in text


def test_fleet_diff_shows_a_new_program_as_the_restart_it_causes():
    """§14/§10: `fleet --diff` names a Program change at the same path by its versions, on
    each node whose roles run it."""
    from reconciler.fleet import fleetdiff, fleetview
    from tests.fleet.test_offline import fleet_of
    from tests.fleet.worlds import model, node, role

    def prog(version: str, sha: str) -> dict:
        return {"apiVersion": "reconciler/v1", "kind": "Program", "metadata": {"name": "llama"},
                "spec": {"runtime": "llamacpp", "version": version, "root": "/opt/llama",
                         "entrypoint": "llama-server",
                         "files": [{"path": "llama-server", "size": 1, "sha256": sha}]}}

    pinned = node("gpu-1", extra={"serve_programs": {"llamacpp": "llama"}})
    old = fleetview.view(fleet_of(pinned, model(), role("coder", 8001), prog("b11434", A)))
    new = fleetview.view(fleet_of(pinned, model(), role("coder", 8001), prog("b11500", B)))
    assert [str(c) for c in fleetdiff.diff(old, new)] == [
        "~ gpu-1 coder (program b11434 → b11500)"]
