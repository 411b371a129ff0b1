"""§14 end to end: the compiled llama-server as a Program from a release archive on nginx.

The test makes a release-style ``.tar.gz`` (``llama-b11434/llama-server`` and a
``LICENSE`` beside it, as llama.cpp's release assets are laid out) of the
testbed's compiled binary, serves it with Debian's nginx on loopback (§1.6:
plain http only to a loopback mirror) at a limited rate, and pins it in a
Program document by the archive's sha256 and every file's. A real ``reconcile
--once`` starts the detached fetch; the fetch is killed with SIGKILL half way;
the next pass's fetch resumes from the partial file's byte N (nginx's log: a
``Range: bytes=N-`` answered 206 with only the rest), unpacks, verifies, and a
later pass starts the server from the verified tree. nginx is not optional
here: without it the test fails, saying how to install it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tarfile
import textwrap
from pathlib import Path

import pytest

from reconciler.models.fetchpolicy import blob_path, partial_path
from tests.doubles.fileserver import NGINX, Nginx
from tests.e2e.conftest import LLAMA_SERVER, free_port, http_get, wait_for
from tests.e2e.test_once import alive, ready

pytestmark = pytest.mark.e2e

LICENSE = b"MIT License\n\nCopyright (c) the llama.cpp authors (a stand-in for the test)\n"


def release_archive(build: str) -> tuple[bytes, list[dict]]:
    """A ``llama-<build>/`` tree in a ``.tar.gz`` (gzip level 1: quick to make), and the
    Program's file list for it (path, size, sha256 of each file it holds)."""
    binary = LLAMA_SERVER.read_bytes()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar:
        top = tarfile.TarInfo(f"llama-{build}")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for name, data, mode in (("LICENSE", LICENSE, 0o644), ("llama-server", binary, 0o755)):
            info = tarfile.TarInfo(f"llama-{build}/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    files = [{"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
             for name, data in (("LICENSE", LICENSE), ("llama-server", binary))]
    return out.getvalue(), files


def program_yaml(name: str, version: str, url: str, archive: bytes, files: list[dict]) -> str:
    listed = "\n".join(f"    - {json.dumps(f)}" for f in files)
    return textwrap.dedent(f"""\
        apiVersion: reconciler/v1
        kind: Program
        metadata: {{name: {name}}}
        spec:
          runtime: llamacpp
          version: {version}
          entrypoint: llama-server
          source: {{url: "{url}", sha256: {hashlib.sha256(archive).hexdigest()},
                    size: {len(archive)}, strip: 1}}
          files:
        """) + listed + "\n"


def test_a_release_archive_killed_mid_fetch_resumes_verifies_and_runs(world, tmp_path):
    """§14/§1.6: a Program whose source is a release archive on loopback nginx: `--once`
    starts the fetch and waits `fetching` (no server); kill -9 of the fetch leaves the
    partial file (not executable, no tree); the next pass resumes with `Range: bytes=N-`
    (206, only the rest sent), unpacks and verifies; then the server runs from the
    verified tree and reports the build over /props."""
    assert os.path.exists(NGINX), (f"no nginx at {NGINX}: the Program fetch e2e needs Debian's "
                                   "nginx (.ci/run installs it: apt-get install nginx)")
    archive, files = release_archive("b11434")
    www = tmp_path / "www"
    www.mkdir()
    (www / "llama-b11434-bin-linux-x64.tar.gz").write_bytes(archive)
    # ~3 s for the first answer; a resumed (Range) answer at full speed, to keep the test short.
    nginx = Nginx(www, tmp_path / "nginx", limit_rate=str(len(archive) // 3), range_rate="0")
    try:
        world.write("program.yaml", program_yaml(
            "llama-b11434", "b11434", nginx.url("llama-b11434-bin-linux-x64.tar.gz"), archive,
            files))
        cache = world.root / "cache"
        world.node(program="llama-b11434", extra=f"  fetch: {{cache: {cache}, min_free: 1MiB}}")
        world.model()
        port = free_port()
        world.role("chat", port)
        plan = world.reconcile("plan")  # (validates first: a problem would exit 1)
        assert plan.returncode == 0 and "> fetch program llama-b11434" in plan.stdout, \
            plan.stdout + plan.stderr

        first = world.reconcile("--once")
        assert first.returncode == 0, first.stdout + first.stderr
        with world.store() as store:
            (rec,) = store.fetches()
        sha = hashlib.sha256(archive).hexdigest()
        part = Path(partial_path(str(cache), sha))
        assert wait_for(lambda: part.exists() and part.stat().st_size >= len(archive) // 4, 20), \
            f"the fetch never got going: {list((cache / 'jobs').glob('*'))} {nginx.log()} " \
            + "".join(p.read_text() for p in (cache / "jobs").glob("*.log"))
        os.kill(rec.pid, signal.SIGKILL)
        assert wait_for(lambda: not alive(rec.pid), 5)
        had = part.stat().st_size
        assert 0 < had < len(archive)
        trees = cache / "programs" / "llama-b11434"
        # nothing unverified is where a server could be started from, nor executable
        assert not trees.exists() or not any(trees.iterdir())
        assert not os.access(part, os.X_OK)
        assert world.pid("chat") is None

        for _ in range(10):  # the next passes resume the fetch, then start the server
            out = world.reconcile("--once")
            assert out.returncode == 0, out.stdout + out.stderr
            if world.pid("chat") is not None:
                break
            wait_for(lambda: any(trees.glob("*/llama-server")), 3)
        assert ready(port, 30), out.stdout
        (tree,) = trees.iterdir()
        assert sorted(p.name for p in tree.iterdir()) == ["LICENSE", "llama-server"]
        assert os.readlink(f"/proc/{world.pid('chat')}/exe") == str(tree / "llama-server")
        assert Path(blob_path(str(cache), sha)).exists() and not part.exists()
        build = json.loads(http_get(port, "/props")[1])["build_info"]
        assert build.startswith("b"), build

        gets = [row for row in nginx.log() if row[0] == "GET"]
        assert len(gets) == 2, gets
        (_, _, rng0, status0, sent0), (_, _, rng1, status1, sent1) = gets
        assert rng0 == "bytes=0-" and sent0 < len(archive), gets  # cut by the kill
        assert (rng1, status1) == (f"bytes={had}-", 206), gets  # resumed from byte N
        assert sent1 == len(archive) - had, gets  # only the rest
        again = world.reconcile("plan")
        assert "No changes" in again.stdout and "fetch" not in again.stdout, again.stdout
    finally:
        nginx.close()
