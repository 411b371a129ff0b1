"""§14 a Program from a release archive: the Models' fetcher, then a safe unpack, verified."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zipfile

import pytest

from reconciler.models import fetchprogram, unpack
from reconciler.models.fetchpolicy import Failure, blob_path
from tests.doubles.fileserver import FaultServer

SERVER = b"\x7fELF llama-server" * 1000
LIB = b"\x7fELF libllama" * 500


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o755, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def release_tar() -> bytes:
    return tar_gz([(member("llama-b1", tarfile.DIRTYPE), None),
                   (member("llama-b1/llama-server"), SERVER),
                   (member("llama-b1/libllama.so", mode=0o644), LIB),
                   (member("llama-b1/libllama.so.0", tarfile.SYMTYPE, link="libllama.so"),
                    None)])


@pytest.fixture
def served():
    server = FaultServer()
    yield server
    server.close()


def job(tmp_path, server, archive: bytes, name: str = "llama-b1.tar.gz",
        files=(("libllama.so", sha(LIB), len(LIB)), ("llama-server", sha(SERVER), len(SERVER))),
        strip: int = 1) -> fetchprogram.ProgramJob:
    server.files[name] = archive
    return fetchprogram.ProgramJob(program="llama-b1", generation="0123456789abcdef",
                                   cache=str(tmp_path / "cache"),
                                   tree=str(tmp_path / "cache" / "programs" / "llama-b1" / "g"),
                                   url=server.url(name), sha256=sha(archive), size=len(archive),
                                   strip=strip, files=files)


def test_a_release_tarball_is_fetched_verified_and_unpacked(tmp_path, served):
    """§14: the archive lands in the shared blob cache by its digest, is unpacked (a link
    inside the tree kept), every file matches, and the tree appears at once by rename."""
    j = job(tmp_path, served, release_tar())
    out = fetchprogram.run(j)
    assert out.ok, out.detail
    assert os.path.exists(blob_path(j.cache, j.sha256))
    tree = tmp_path / "cache" / "programs" / "llama-b1" / "g"
    assert (tree / "llama-server").read_bytes() == SERVER
    assert stat.S_IMODE((tree / "llama-server").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "libllama.so").stat().st_mode) == 0o644
    assert os.readlink(tree / "libllama.so.0") == "libllama.so"
    assert sorted(os.listdir(tree.parent)) == ["g"]  # no work directory left
    assert fetchprogram.run(j).detail == "already in the cache"


def test_a_zip_release_works_alike(tmp_path, served):
    """§14: a .zip release asset (GitHub's usual) unpacks the same way, modes kept."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        info = zipfile.ZipInfo("bin/llama-server")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        z.writestr(info, SERVER)
        z.writestr("bin/libllama.so", LIB)
    got = fetchprogram.run(job(tmp_path, served, out.getvalue(), name="llama.zip"))
    assert got.ok, got.detail
    assert os.access(tmp_path / "cache/programs/llama-b1/g/llama-server", os.X_OK)


def test_an_archive_with_another_file_list_is_refused_and_nothing_kept(tmp_path, served):
    """§14: every file the archive holds is the Program's: one more, one less, or another
    digest is a mismatch (sticky, like a Model's), and no tree appears."""
    extra = job(tmp_path, served, release_tar(), files=(("llama-server", sha(SERVER),
                                                          len(SERVER) + len(LIB)),))
    out = fetchprogram.run(extra)
    assert (out.ok, out.failure) == (False, Failure.MISMATCH)
    assert "holds files the Program does not name: libllama.so" in out.detail
    other = job(tmp_path, served, release_tar(),
                files=(("libllama.so", sha(LIB), len(LIB)), ("llama-server", "0" * 64,
                                                             len(SERVER))))
    out = fetchprogram.run(other)
    assert "llama-server in the archive has sha256" in out.detail and "0" * 64 in out.detail
    assert not os.path.exists(other.tree)
    assert os.listdir(os.path.dirname(other.tree)) == []


def test_a_wrong_archive_digest_is_never_unpacked(tmp_path, served):
    """§14/§1.6: the archive's own digest is checked before anything is unpacked."""
    archive = release_tar()
    j = job(tmp_path, served, archive)
    served.files["llama-b1.tar.gz"] = archive[:-5] + bytes([archive[-5] ^ 1]) + archive[-4:]
    out = fetchprogram.run(j)
    assert (out.ok, out.failure) == (False, Failure.MISMATCH)
    assert not os.path.exists(os.path.dirname(j.tree))


@pytest.mark.parametrize("members, why", [
    ([(member("../evil"), b"x")], "a '..' component is refused"),
    ([(member("/etc/evil"), b"x")], "an absolute path is refused"),
    ([(member("a/link", tarfile.SYMTYPE, link="../../etc/passwd"), None)],
     "a link out of the archive's tree"),
    ([(member("a/link", tarfile.SYMTYPE, link="/etc/passwd"), None)],
     "a link to an absolute path"),
    ([(member("a/hard", tarfile.LNKTYPE, link="a/x"), None)], "a hard link is refused"),
    ([(member("a/dev", tarfile.CHRTYPE), None)], "a device or FIFO is never unpacked"),
    ([(member("a/fifo", tarfile.FIFOTYPE), None)], "a device or FIFO is never unpacked"),
    ([(member("a/big"), b"x" * 100)], "more bytes than the Program declares"),
    ([(member("a/x"), b"1"), (member("a/x"), b"2")], "the archive holds it twice"),
])
def test_unpacking_refuses_what_leaves_the_tree(tmp_path, members, why):
    """§14: traversal, absolute names, links out of the tree, hard links, devices, FIFOs,
    more bytes than declared, a member twice: Unsafe, nothing written outside."""
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_gz(members))
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(unpack.Unsafe, match=why):
        unpack.extract(str(archive), str(dest), kind="tar.gz", limit=10)
    assert not (tmp_path / "evil").exists()


def test_a_pass_fetches_a_program_then_starts_the_role_from_the_cache(tmp_path, served):
    """§14: a role whose Program has a source waits `fetching` while a planned fetch
    (`> fetch program llama-b1 …`) runs detached; then it starts from the cache's tree."""
    import textwrap
    import time

    from reconciler.core.decisions import Reason, Verb
    from reconciler.engine import loop
    from reconciler.planner import render
    from reconciler.state.store import Store
    from tests.loop.test_pass import NOW, free_port

    archive = release_tar()
    served.files["llama-b1.tar.gz"] = archive
    model = tmp_path / "models" / "tiny.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    port = free_port()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "all.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: NodeConfig
        metadata: {{name: node}}
        spec:
          allowed_ports: {{from: {port}, to: {port}}}
          serve_programs: {{llamacpp: llama-b1}}
          run_as: {{uid: 65534, gid: 65534}}
          fetch: {{cache: {tmp_path / "cache"}, min_free: 0}}
        ---
        apiVersion: reconciler/v1
        kind: Program
        metadata: {{name: llama-b1}}
        spec:
          runtime: llamacpp
          version: b1
          entrypoint: llama-server
          source: {{url: "{served.url("llama-b1.tar.gz")}", sha256: {sha(archive)},
                    size: {len(archive)}, strip: 1}}
          files:
            - {{path: libllama.so, size: {len(LIB)}, sha256: {sha(LIB)}}}
            - {{path: llama-server, size: {len(SERVER)}, sha256: {sha(SERVER)}}}
        ---
        apiVersion: reconciler/v1
        kind: Model
        metadata: {{name: tiny}}
        spec: {{format: gguf, root: {model.parent}, shards: [{{path: tiny.gguf, size: 4,
                sha256: {sha(b"GGUF")}}}]}}
        ---
        apiVersion: reconciler/v1
        kind: InferenceSpec
        metadata: {{name: chat}}
        spec: {{runtime: llamacpp, mode: managed, model: tiny, serve: {{port: {port}}}}}
        """))
    inputs = lambda store: loop.PassInputs(paths=[str(tmp_path / "m")], store=store,  # noqa: E731
                                           state_dir=str(tmp_path / "state"),
                                           clock=lambda: NOW)
    with Store(tmp_path / "state") as store:
        first = loop.apply_pass(inputs(store))
        (d,) = first.plan.decisions
        assert (d.verb, d.reason) == (Verb.WAIT, Reason.FETCHING)
        (f,) = first.plan.fetches
        assert render.fetch_line(f).startswith("> fetch program llama-b1 ")
        tree = first.desired.programs[0].root
        from reconciler.system import programs
        for _ in range(100):  # the detached fetch: done, and gone
            programs.reap()
            planned = loop.plan_pass(inputs(store))
            (d,) = planned.plan.decisions
            if d.verb is not Verb.WAIT:
                break
            time.sleep(0.1)
        assert d.verb is Verb.START
        assert d.act.launch.argv[0] == f"{tree}/llama-server"


def test_a_killed_program_fetch_resumes_where_it_stopped(tmp_path, served):
    """§14/§1.6: the partial archive a killed fetch left is continued with a Range request
    (the same fetcher as a Model's), not fetched again from byte 0."""
    archive = release_tar()
    j = job(tmp_path, served, archive)
    part = tmp_path / "cache" / "partial" / f"{j.sha256}.part"
    part.parent.mkdir(parents=True)
    half = len(archive) // 2
    part.write_bytes(archive[:half])
    out = fetchprogram.run(j)
    assert out.ok, out.detail
    (method, path, headers), = [r for r in served.requests if r[0] == "GET"]
    assert headers.get("Range") == f"bytes={half}-"
    assert served.sent == len(archive) - half
