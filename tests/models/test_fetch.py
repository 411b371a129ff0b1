"""The downloader against real loopback HTTP servers (BEHAVIOUR §1.6): nginx and a fault server."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.models import fetch, fetchmodel, fetchpolicy
from reconciler.models.fetchpolicy import Failure, FileJob, blob_path, partial_path
from tests.doubles.fileserver import NO_NGINX, NO_NGINX_WHY, FaultServer, Nginx

DATA = os.urandom(3 * fetch.CHUNK + 12345)
SHA = hashlib.sha256(DATA).hexdigest()


def no_sleep(_: float) -> None:
    pass


@pytest.fixture
def server():
    s = FaultServer()
    s.files["m.gguf"] = DATA
    yield s
    s.close()


def job(cache: Path, url: str, **kw) -> FileJob:
    return FileJob(url=url, sha256=kw.pop("sha256", SHA), size=kw.pop("size", len(DATA)),
                   cache=str(cache), label="m: m.gguf", **kw)


def nothing_served(cache: Path) -> bool:
    """No blob and no partial file is left (a failed file is never served)."""
    blobs = cache / "blobs"
    parts = cache / "partial"
    return (not blobs.exists() or not any(blobs.iterdir())) and (
        not parts.exists() or not any(parts.iterdir()))


@pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)
def test_nginx_file_is_fetched_verified_and_moved_into_the_cache(tmp_path: Path) -> None:
    """A real nginx: the file lands at blobs/<sha256>, nothing is left in partial/."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "m.gguf").write_bytes(DATA)
    nginx = Nginx(www, tmp_path / "nginx")
    try:
        out = fetch.download(job(tmp_path / "cache", nginx.url("m.gguf")))
    finally:
        nginx.close()
    assert out.ok, out.detail
    assert Path(blob_path(str(tmp_path / "cache"), SHA)).read_bytes() == DATA
    assert not Path(partial_path(str(tmp_path / "cache"), SHA)).exists()
    assert out.fetched == len(DATA)


@pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)
def test_nginx_resumes_a_partial_file_with_a_range(tmp_path: Path) -> None:
    """A partial file (a killed fetch) is continued from its length: only the rest is read."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "m.gguf").write_bytes(DATA)
    cache = tmp_path / "cache"
    part = Path(partial_path(str(cache), SHA))
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:len(DATA) // 2])
    nginx = Nginx(www, tmp_path / "nginx")
    try:
        out = fetch.download(job(cache, nginx.url("m.gguf")))
    finally:
        nginx.close()
    assert out.ok, out.detail
    assert out.fetched == len(DATA) - len(DATA) // 2
    assert "bytes=%d-" % (len(DATA) // 2) in (tmp_path / "nginx" / "access.log").read_text() \
        or out.fetched < len(DATA)


def test_a_206_must_continue_the_file_at_byte_n(tmp_path: Path, server: FaultServer) -> None:
    """§1.6: a range answer that starts elsewhere than the partial file's size (here 4 KiB
    further: bytes skipped) is refused with the byte it had to start at; nothing is served."""
    half = len(DATA) // 2
    part = Path(partial_path(str(tmp_path), SHA))
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:half])
    server.faults["m.gguf"] = {"range_shift": 4096}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert not out.ok and out.failure is Failure.HTTP, out.detail
    assert f"does not continue the file at byte {half}" in out.detail
    assert nothing_served(tmp_path)
    assert fetchpolicy.body_start(206, f"bytes {half}-{len(DATA) - 1}/{len(DATA)}", None,
                                  half, len(DATA)) == half
    assert isinstance(fetchpolicy.body_start(206, f"bytes 0-{len(DATA) - 1}/{len(DATA)}", None,
                                             half, len(DATA)), str)


@pytest.mark.skipif(NO_NGINX, reason=NO_NGINX_WHY)
def test_nginx_416_is_complete_only_when_the_partial_file_has_the_whole_size(
        tmp_path: Path) -> None:
    """§1.6: the mirror's file is shorter than the Model says; a partial file of the mirror's
    length gets nginx's 416: an HTTP failure (the partial file removed), never a complete
    file. A 416 means complete only at the Model's whole size."""
    short = len(DATA) - 1000
    www = tmp_path / "www"
    www.mkdir()
    (www / "m.gguf").write_bytes(DATA[:short])
    cache = tmp_path / "cache"
    part = Path(partial_path(str(cache), SHA))
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:short])
    nginx = Nginx(www, tmp_path / "nginx")
    try:
        out = fetch.download(job(cache, nginx.url("m.gguf")), sleep=no_sleep)
    finally:
        nginx.close()
    assert " 416 " in (tmp_path / "nginx" / "access.log").read_text()
    assert not out.ok and out.failure is Failure.HTTP and "HTTP 416" in out.detail, out.detail
    assert nothing_served(cache)
    assert fetchpolicy.body_start(416, f"bytes */{short}", None, short, len(DATA)) == "HTTP 416"
    assert fetchpolicy.body_start(416, f"bytes */{len(DATA)}", None, len(DATA),
                                  len(DATA)) == len(DATA)


def test_a_connection_dropped_at_half_is_resumed(tmp_path: Path, server: FaultServer) -> None:
    """Dropped at 50 %: the retry asks for the rest; bytes sent twice ≤ one chunk."""
    server.faults["m.gguf"] = {"drop_at": len(DATA) // 2}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert out.ok, out.detail
    assert Path(blob_path(str(tmp_path), SHA)).read_bytes() == DATA
    assert server.sent - len(DATA) <= fetch.CHUNK
    ranges = [h.get("Range") for m, _, h in server.requests if m == "GET"]
    assert ranges[0] == "bytes=0-" and ranges[1] != "bytes=0-"


def test_a_server_ignoring_the_range_restarts_the_file_cleanly(tmp_path: Path,
                                                               server: FaultServer) -> None:
    """A 200 to a range request: the file restarts at byte 0 and still verifies."""
    part = Path(partial_path(str(tmp_path), SHA))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 1000)  # not even the right bytes
    server.faults["m.gguf"] = {"ignore_range": True}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert out.ok, out.detail


def test_wrong_bytes_are_refused_removed_and_both_digests_named(tmp_path: Path,
                                                                server: FaultServer) -> None:
    """A digest mismatch: refused, the file removed, the Model's and the download's digests named."""
    server.faults["m.gguf"] = {"wrong": True}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    got = hashlib.sha256(bytes(b ^ 0xFF for b in DATA)).hexdigest()
    assert not out.ok and out.failure is Failure.MISMATCH
    assert SHA in out.detail and got in out.detail and out.sha256 == got
    assert nothing_served(tmp_path)


def test_a_declared_length_over_the_size_aborts_before_reading(tmp_path: Path,
                                                               server: FaultServer) -> None:
    """Content-Length above the Model's size: aborted, nothing kept."""
    server.faults["m.gguf"] = {"extra": 10}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert not out.ok and out.failure is Failure.OVERSIZE, out.detail
    assert out.fetched == 0 and nothing_served(tmp_path)


def test_more_bytes_than_declared_on_the_wire_abort(tmp_path: Path, server: FaultServer) -> None:
    """No length given, then more bytes than the Model's size: aborted mid-stream."""
    server.faults["m.gguf"] = {"extra": fetch.CHUNK, "no_length": True}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert not out.ok and out.failure is Failure.OVERSIZE, out.detail
    assert "more than the declared" in out.detail and nothing_served(tmp_path)


def test_a_redirect_to_plain_http_beyond_loopback_is_refused(tmp_path: Path,
                                                             server: FaultServer) -> None:
    """A redirect to http:// on another host: refused before any connection to it."""
    server.faults["m.gguf"] = {"redirect": "http://example.invalid/m.gguf"}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert not out.ok and out.failure is Failure.REDIRECT and "refused" in out.detail
    assert nothing_served(tmp_path)


def test_a_redirect_loop_is_refused(tmp_path: Path, server: FaultServer) -> None:
    """A → B → A: refused as a loop."""
    server.faults["m.gguf"] = {"redirect": server.url("b")}
    server.faults["b"] = {"redirect": server.url("m.gguf")}
    out = fetch.download(job(tmp_path, server.url("m.gguf")), sleep=no_sleep)
    assert not out.ok and out.failure is Failure.REDIRECT and "loop" in out.detail


def test_redirect_policy_never_goes_from_https_down_to_http() -> None:
    """At the policy level (no TLS server in the tests): https → http is refused, even to
    loopback; https → https is followed; a URL with a password is refused."""
    seen: list[str] = []
    assert "https to http" in fetchpolicy.redirect_refusal(
        "https://huggingface.co/x", "http://127.0.0.1/x", seen)
    assert fetchpolicy.redirect_refusal("https://huggingface.co/x", "https://cdn.hf.co/y",
                                        seen) is None
    assert "refused" in fetchpolicy.url_refusal("http://example.com/x")
    assert "password" in fetchpolicy.url_refusal("https://u:p@example.com/x")
    assert fetchpolicy.url_refusal("http://127.0.0.1:8/x") is None


def test_tls_is_verified_and_https_never_redirects_down_to_http(tmp_path: Path) -> None:
    """A real TLS server on loopback with a self-signed certificate: refused (not retried)
    with the system's CAs; accepted with its CA given (an option only tests use); and from
    there a redirect to plain http, even on loopback, is refused."""
    from tests.doubles.fileserver import self_signed

    cert, key = self_signed(tmp_path)
    server, plain = FaultServer(tls=(cert, key)), FaultServer()
    try:
        server.files["m.gguf"] = DATA
        plain.files["m.gguf"] = DATA
        slept: list[float] = []
        out = fetch.download(job(tmp_path / "a", server.url("m.gguf")), sleep=slept.append)
        assert not out.ok and out.failure is Failure.REFUSED and slept == []
        assert "certificate verify failed" in out.detail
        out = fetch.download(job(tmp_path / "b", server.url("m.gguf"), verify=cert))
        assert out.ok, out.detail
        server.faults["m.gguf"] = {"redirect": plain.url("m.gguf")}
        out = fetch.download(job(tmp_path / "c", server.url("m.gguf"), verify=cert),
                             sleep=no_sleep)
        assert not out.ok and out.failure is Failure.REDIRECT and "https to http" in out.detail
        assert plain.requests == []
    finally:
        server.close()
        plain.close()


def test_a_full_cache_filesystem_gives_a_clear_reason_and_serves_nothing(tmp_path: Path,
                                                                        server: FaultServer) -> None:
    """The cache on a 1 MiB tmpfs: no_space, the partial file removed, no blob."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(reason=f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        out = fetch.download(job(mnt, server.url("m.gguf")), sleep=no_sleep)
        assert not out.ok and out.failure is Failure.NO_SPACE, out.detail
        assert "no space left" in out.detail
        assert nothing_served(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_token_goes_only_to_the_hub_and_a_missing_token_file_is_named(
        tmp_path: Path, server: FaultServer) -> None:
    """The CDN request carries no Authorization; an unreadable token file says which file."""
    cdn = FaultServer(host="127.0.0.2")
    try:
        cdn.files["m.gguf"] = DATA
        server.hub["org/tiny"] = ("c" * 40, cdn.base)
        token = tmp_path / "token"
        token.write_text("hf_secret\n")
        base = dict(model="m", generation="g", cache=str(tmp_path / "cache"),
                    tree=str(tmp_path / "cache/models/m/g"),
                    files=(("m.gguf", f"{server.base}/org/tiny/resolve/{'c' * 40}/m.gguf",
                            SHA, len(DATA)),),
                    token_origin=server.base)
        out = fetchmodel.run(fetchmodel.ModelJob(token_file=str(token), **base))
        assert out.ok, out.detail
        assert server.requests[0][2].get("Authorization") == "Bearer hf_secret"
        assert all("Authorization" not in h for _, _, h in cdn.requests)
        assert (tmp_path / "cache/models/m/g/m.gguf").read_bytes() == DATA
        missing = fetchmodel.run(fetchmodel.ModelJob(token_file=str(tmp_path / "nope"),
                                                     **base | {"tree": str(tmp_path / "t2")}))
        assert not missing.ok and missing.failure == Failure.TOKEN
        assert str(tmp_path / "nope") in missing.detail and "hf_secret" not in missing.detail
    finally:
        cdn.close()


def test_the_token_goes_only_to_the_hubs_scheme_host_and_port(tmp_path: Path,
                                                          server: FaultServer) -> None:
    """§1.6: a CDN on the Hub's own host but another port gets no Authorization (an origin is
    scheme, host *and* port); the Hub itself does."""
    cdn = FaultServer(host="127.0.0.1")
    try:
        cdn.files["m.gguf"] = DATA
        server.hub["org/tiny"] = ("c" * 40, cdn.base)
        token = tmp_path / "token"
        token.write_text("hf_secret\n")
        out = fetchmodel.run(fetchmodel.ModelJob(
            model="m", generation="g", cache=str(tmp_path / "cache"),
            tree=str(tmp_path / "cache/models/m/g"), token_file=str(token),
            files=(("m.gguf", f"{server.base}/org/tiny/resolve/{'c' * 40}/m.gguf", SHA,
                    len(DATA)),), token_origin=server.base))
        assert out.ok, out.detail
        assert cdn.port != server.port
        assert server.requests[0][2].get("Authorization") == "Bearer hf_secret"
        assert cdn.requests and all("Authorization" not in h for _, _, h in cdn.requests)
    finally:
        cdn.close()
    same = fetchpolicy.same_origin
    assert same("https://hub.example/x", "https://HUB.example:443/")
    assert not same("https://hub.example:8443/x", "https://hub.example")
    assert not same("http://hub.example:443/x", "https://hub.example")
    assert not same("https://cdn.example/x", "https://hub.example")


def test_a_killed_fetch_process_is_resumed_by_the_next(tmp_path: Path,
                                                       server: FaultServer) -> None:
    """kill -9 of the detached fetch mid-file: the next one sends only the rest (≤ 1 chunk twice)."""
    big = os.urandom(40 * fetch.CHUNK)
    sha = hashlib.sha256(big).hexdigest()
    server.files["big"] = big
    server.faults["big"] = {"delay": 0.01}
    mj = fetchmodel.ModelJob(model="m", generation="g", cache=str(tmp_path / "c"),
                             tree=str(tmp_path / "c/models/m/g"),
                             files=(("big.gguf", server.url("big"), sha, len(big)),))
    path = tmp_path / "job.json"
    path.write_text(mj.to_json())
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.models.fetchmodel", str(path)],
                            start_new_session=True)
    part = Path(partial_path(mj.cache, sha))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not part.exists()
                                           or part.stat().st_size < len(big) // 2):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    had = part.stat().st_size
    assert 0 < had < len(big)
    server.faults["big"] = {}
    sent_before = server.sent
    out = fetchmodel.run(mj)
    assert out.ok, out.detail
    assert server.sent - sent_before - (len(big) - had) <= fetch.CHUNK
    assert Path(mj.tree, "big.gguf").read_bytes() == big
