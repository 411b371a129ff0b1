"""`reconcile models add hf://…` / `--url` against a Hub double on loopback (BEHAVIOUR §1.6)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.models import hub
from tests.doubles.fileserver import FaultServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def the_hub():
    hub_server, cdn = FaultServer(), FaultServer(host="127.0.0.2")
    hub_server.hub["org/tiny"] = (COMMIT, cdn.base)
    yield hub_server, cdn
    hub_server.close()
    cdn.close()


def add(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler", "models", "add", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_a_branch_is_written_as_the_commit_it_names_now(the_hub, tmp_path: Path) -> None:
    """hf://org/tiny/x.gguf@main: the document has the X-Repo-Commit, the LFS sha256 and size,
    no root; only HEADs were sent (nothing downloaded) and never to the CDN."""
    server, cdn = the_hub
    data = os.urandom(5000)
    server.files["tiny-q4.gguf"] = data
    out = add(f"hf://org/tiny/tiny-q4.gguf@main", "--hf-endpoint", server.base,
              "-o", str(tmp_path / "m.yaml"))
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load((tmp_path / "m.yaml").read_text())
    assert doc["spec"] == {"format": "gguf", "source": {"hf": "org/tiny", "revision": COMMIT},
                           "shards": [{"path": "tiny-q4.gguf", "size": 5000,
                                       "sha256": hashlib.sha256(data).hexdigest()}]}
    assert [m for m, _, _ in server.requests] == ["HEAD"] and cdn.requests == []
    valid = subprocess.run([sys.executable, "-m", "reconciler", "validate", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert valid.returncode == 0, valid.stdout + valid.stderr


def test_a_split_gguf_brings_every_part_at_one_commit(the_hub) -> None:
    """§1.6 ``models add hf://…-00001-of-00003.gguf`` writes every part of a split GGUF, with its
    size, at one commit."""
    server, _ = the_hub
    for i in (1, 2, 3):
        server.files[f"big-0000{i}-of-00003.gguf"] = os.urandom(100 * i)
    out = add("hf://org/tiny/big-00001-of-00003.gguf", "--hf-endpoint", server.base)
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    assert [s["size"] for s in doc["spec"]["shards"]] == [100, 200, 300]
    assert doc["metadata"]["name"] == "big"
    assert doc["spec"]["source"]["revision"] == COMMIT


def test_a_missing_file_says_what_the_hub_said(the_hub) -> None:
    """§1.6 a file the Hub does not have fails ``models add`` (exit 1) with what the Hub said (404,
    EntryNotFound)."""
    server, _ = the_hub
    out = add("hf://org/tiny/nope.gguf@main", "--hf-endpoint", server.base)
    assert out.returncode == 1 and "HTTP 404 (EntryNotFound)" in out.stderr


def test_the_token_goes_to_the_hub_and_a_missing_token_file_is_named(the_hub, tmp_path) -> None:
    """§1.6 the token from ``--hf-token-file`` goes to the Hub as a Bearer token; a missing token
    file is named in the error."""
    server, cdn = the_hub
    server.files["t.gguf"] = b"x" * 10
    token = tmp_path / "tok"
    token.write_text("hf_abc\n")
    out = add("hf://org/tiny/t.gguf", "--hf-endpoint", server.base, "--hf-token-file", str(token))
    assert out.returncode == 0, out.stderr
    assert server.requests[-1][2].get("Authorization") == "Bearer hf_abc"
    missing = add("hf://org/tiny/t.gguf", "--hf-endpoint", server.base,
                  "--hf-token-file", str(tmp_path / "gone"))
    assert missing.returncode == 1 and str(tmp_path / "gone") in missing.stderr


def test_a_non_lfs_file_is_refused_for_want_of_a_sha256() -> None:
    """The ETag of a non-LFS file is a git blob id: no sha256 to write."""
    with pytest.raises(ValueError, match="not an LFS file"):
        hub.file_meta({"etag": '"' + "a" * 40 + '"', "content-length": "10"}, "hf://o/r/f")


def test_x_repo_commit_must_be_a_commit(the_hub, tmp_path: Path) -> None:
    """§1.6: a Hub answering X-Repo-Commit with something that is no commit (a branch name, a
    short id) is refused, nothing written: the document pins a commit, 40 hex digits."""
    server, _ = the_hub
    server.files["t.gguf"] = b"x" * 10
    server.hub["org/tiny"] = ("main", server.hub["org/tiny"][1])
    out = add("hf://org/tiny/t.gguf@main", "--hf-endpoint", server.base,
              "-o", str(tmp_path / "m.yaml"))
    assert out.returncode == 1 and "X-Repo-Commit 'main' is not a commit" in out.stderr
    assert not (tmp_path / "m.yaml").exists()
    lfs = {"x-linked-etag": '"' + "b" * 64 + '"', "x-linked-size": "10"}
    for bad in ("0123456", COMMIT.upper(), COMMIT + "0"):
        with pytest.raises(ValueError, match="is not a commit"):
            hub.file_meta(lfs | {"x-repo-commit": bad}, "hf://o/r/f")
    assert hub.file_meta(lfs | {"x-repo-commit": COMMIT}, "hf://o/r/f").commit == COMMIT


def test_a_url_needs_its_sha256_unless_the_server_states_it(tmp_path) -> None:
    """§1.6 ``models add --url`` needs ``--sha256`` unless the server states the file's hash; given,
    it is written to the shard."""
    server = FaultServer()
    try:
        server.files["x.gguf"] = b"y" * 77
        out = add("--url", server.url("x.gguf"))
        assert out.returncode == 1 and "--sha256" in out.stderr
        sha = hashlib.sha256(b"y" * 77).hexdigest()
        out = add("--url", server.url("x.gguf"), "--sha256", sha)
        assert out.returncode == 0, out.stderr
        shard = yaml.safe_load(out.stdout)["spec"]["shards"][0]
        assert shard == {"path": "x.gguf", "size": 77, "sha256": sha, "url": server.url("x.gguf")}
    finally:
        server.close()


def test_hf_names_parse_and_refuse() -> None:
    """§1.6 ``hf://ORG/REPO/PATH[@REV]`` parses (revision ``main`` by default); a name without a
    repository is refused."""
    assert hub.parse_name("hf://o/r/a/b.gguf@v1.0") == hub.HubName(repo="o/r", path="a/b.gguf",
                                                                  revision="v1.0")
    assert hub.parse_name("hf://o/r/b.gguf").revision == "main"
    with pytest.raises(ValueError):
        hub.parse_name("hf://o/b.gguf")
