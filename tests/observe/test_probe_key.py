"""A role's API key (BEHAVIOUR §1.4): probes send it as a bearer token, read as llama-server does."""

from __future__ import annotations

from reconciler.runtimes.common import ProbeRequest
from reconciler.world import probe


def test_the_key_is_sent_as_a_bearer_token_only_when_given() -> None:
    """§2 a probe carries the role's key as a Bearer token only when there is one."""
    request = ProbeRequest(method="GET", path="/props")
    _, wire = probe._encode("127.0.0.1", 8080, request, "k3y")
    assert b"\r\nAuthorization: Bearer k3y\r\n" in wire
    _, wire = probe._encode("127.0.0.1", 8080, request)
    assert b"Authorization" not in wire


def test_the_key_file_is_read_like_llama_server_reads_it(tmp_path) -> None:
    """The first line that is neither empty nor a # comment; None when missing or empty."""
    path = tmp_path / "key"
    path.write_text("# comment\n\n  first-key  \nsecond\n")
    assert probe.api_key(str(path)) == "first-key"
    path.write_text("# only a comment\n")
    assert probe.api_key(str(path)) is None
    assert probe.api_key(str(tmp_path / "none")) is None
    assert probe.api_key(None) is None
