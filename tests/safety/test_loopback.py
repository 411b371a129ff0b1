"""§5 loopback only: the one owner (``core/loopback.py``), pinned by examples and a property."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reconciler.core import loopback

PACKAGE = Path(__file__).resolve().parents[2] / "reconciler"

#: The issue's examples, and the shapes every caller passes (listeners, hosts, addresses).
GOLDEN = [
    ("127.0.0.1", True), ("127.255.255.254", True), ("127.0.0.1:8090", True),
    ("::1", True), ("[::1]", True), ("[::1]:8090", True),
    ("localhost", True), ("localhost:9000", True),
    ("::ffff:127.0.0.1", True), ("[::ffff:127.0.0.1]:8090", True), ("::ffff:127.9.9.9", True),
    ("0.0.0.0", False), ("0.0.0.0:8090", False),
    ("::", False), ("[::]", False), ("[::]:8090", False),
    ("", False), (":8090", False), ("[]:8090", False),
    ("10.0.0.5", False), ("192.168.1.2:8090", False), ("[fe80::1]:8090", False),
    ("::ffff:10.0.0.1", False), ("::ffff:0.0.0.0", False), ("128.0.0.1", False),
    ("127.evil.example", False), ("localhost.example", False), ("LOCALHOST", False),
    ("[::1]:port", False), ("127.0.0.1:", False), ("::1:8090", False),
    # only the name `localhost` itself: not a name that ends (or starts) with it
    ("notlocalhost", False), ("notlocalhost:9000", False), ("evil.localhost", False),
    ("localhostx", False),
]


@pytest.mark.parametrize(("text", "loop"), GOLDEN)
def test_golden(text: str, loop: bool) -> None:
    """§5 each example of the rule: 127/8, ::1, [::1]:port, localhost, mapped 127/8 are
    loopback; 0.0.0.0, ::, [::], empty, other addresses and names are not."""
    assert loopback.is_loopback(text) is loop


def _oracle(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """The rule restated on the bytes, independently of ``ipaddress``'s own flags."""
    raw = ip.packed
    if ip.version == 4:
        return raw[0] == 127
    mapped = raw[:12] == bytes(10) + b"\xff\xff"
    return raw == bytes(15) + b"\x01" or (mapped and raw[12] == 127)


_SPECIAL = st.sampled_from([
    "0.0.0.0", "::", "::1", "::ffff:127.0.0.1", "::ffff:0.0.0.0", "127.0.0.1", "::ffff:7f00:1",
]).map(ipaddress.ip_address)
ADDRESSES = st.one_of(_SPECIAL, st.ip_addresses(v=4), st.ip_addresses(v=6),
                      st.ip_addresses(v=4).map(lambda v4: ipaddress.ip_address(f"::ffff:{v4}")))
PORTS = st.integers(min_value=0, max_value=65535)


def _shapes(ip, port: int) -> list[str]:
    if ip.version == 4:
        return [str(ip), f"{ip}:{port}"]
    return [str(ip), ip.exploded, f"[{ip}]", f"[{ip}]:{port}", f"[{ip.exploded}]:{port}"]


@given(ADDRESSES, PORTS)
@example(ipaddress.ip_address("::"), 8090)
@example(ipaddress.ip_address("0.0.0.0"), 8090)
@example(ipaddress.ip_address("::ffff:127.0.0.1"), 8090)
@example(ipaddress.ip_address("::1"), 0)
def test_every_shape_of_every_address_follows_the_rule(ip, port) -> None:
    """§5 for any IPv4 or IPv6 address (wildcards and v4-mapped included), bare, bracketed
    or with a port: loopback exactly when it is 127/8, ::1 or a mapped 127/8."""
    want = _oracle(ip)
    for text in _shapes(ip, port):
        assert loopback.is_loopback(text) is want, text
    assert loopback.is_loopback_host(str(ip)) is want


@given(st.text(max_size=40))
@example("::")
@example("[::]:80")
def test_anything_called_loopback_names_a_loopback_address(text: str) -> None:
    """§5 no text is loopback unless its host is ``localhost`` or an address the rule accepts."""
    if loopback.is_loopback(text):
        host = loopback.host_of(text)
        assert host is not None
        assert host == "localhost" or _oracle(ipaddress.ip_address(host))


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,5}){0,2}", fullmatch=True), PORTS)
def test_names_other_than_localhost_are_not_loopback(name: str, port: int) -> None:
    """§5 no DNS is asked: a name other than ``localhost`` is never loopback."""
    assert loopback.is_loopback(name) is (name == "localhost")
    assert loopback.is_loopback(f"{name}:{port}") is (name == "localhost")


def test_split_host_port() -> None:
    """The helper callers share: brackets off, the port text as written, v6 only bracketed."""
    assert loopback.split_host_port("127.0.0.1:80") == ("127.0.0.1", "80")
    assert loopback.split_host_port("[::1]:80") == ("::1", "80")
    assert loopback.split_host_port("localhost:") == ("localhost", "")
    assert loopback.split_host_port("::1:80") is None
    assert loopback.split_host_port("[::1]") is None
    assert loopback.split_host_port("127.0.0.1") is None


def test_no_other_module_decides_loopback() -> None:
    """One owner: only ``core/loopback.py`` imports ``ipaddress`` (``world/probe.py`` asks its
    ``ip_of`` to refuse a host name: no DNS) and nothing else spells the old ad-hoc checks,
    nor a list of loopback names of its own (llama-swap's ``proxy`` once had one)."""
    importers, adhoc = set(), set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(PACKAGE).as_posix()
        if re.search(r"^\s*(import ipaddress|from ipaddress )", text, re.M):
            importers.add(rel)
        if re.search(r"""startswith\(["']127\.|== ["']::1["']|(?<!loopback)\.is_loopback\b|127\\\.\\d"""
                     r"""|\(["'](127\.0\.0\.1|localhost|::1)["'], ["'](127\.0\.0\.1|localhost|::1)["']""",
                     text):
            adhoc.add(rel)
    assert importers == {"core/loopback.py"}
    assert adhoc <= {"core/loopback.py"}


@pytest.mark.parametrize(("url", "allowed"), [
    ("http://127.0.0.1:8080/m.gguf", True), ("http://localhost/m.gguf", True),
    ("http://[::1]:8080/m.gguf", True), ("https://example.com/m.gguf", True),
    ("http://0.0.0.0:8080/m.gguf", False), ("http://[::]:8080/m.gguf", False),
    ("http://10.0.0.1/m.gguf", False), ("http://127.evil.example/m.gguf", False),
])
def test_a_fetch_over_plain_http_goes_to_loopback_only(url: str, allowed: bool) -> None:
    """§1.6/§5 plain http only to a loopback mirror: the fetch policy asks the same rule."""
    from reconciler.models import fetchpolicy

    assert (fetchpolicy.url_refusal(url) is None) is allowed
