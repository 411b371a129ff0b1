"""Loopback only (BEHAVIOUR §5): the one rule that says an address is loopback (PURE).

Every place that decides whether a host, an address or a listener is
reachable only from this machine asks ``is_loopback`` (or, for a bare host,
``is_loopback_host``): manifest validation (``serve.host``, the router's
``listen``, the status page's ``listen``), the observer and the after-start
check (a listener beyond loopback is *exposed*), orphans, the executor (no
packet to a host beyond loopback), the router (no forward off loopback), the
status page's own server, the fetch policy (plain http only to a loopback
mirror), ``--metrics-addr`` and the interface addresses the observer
connects to when it cannot read the socket table. It is the one module
that imports ``ipaddress`` (``tests/test_import_direction.py``'s ``OWNERS``
keeps it so): the probes ask ``ip_of`` whether a host is an address.

Loopback is: IPv4 ``127.0.0.0/8``, IPv6 ``::1``, an IPv4-mapped IPv6
address of 127/8 (``::ffff:127.0.0.1``: a socket bound there accepts only
from 127.0.0.1), and the name ``localhost``. Not loopback: the wildcards
``0.0.0.0`` and ``::`` (every interface), any other address, any other name
(no DNS is asked), the empty string, and anything malformed.

Accepted shapes: a bare host (``127.0.0.1``, ``::1``, ``localhost``),
``[v6]``, ``host:port`` and ``[v6]:port``. An IPv6 address with a port must
be bracketed: ``::1:8080`` is read as the address ``::1:8080`` (not loopback).
"""

from __future__ import annotations

import functools
import ipaddress

#: The one name that means loopback (never resolved: no DNS is asked).
LOCALHOST = "localhost"
#: What ``localhost`` stands for where an address is needed.
LOCALHOST_ADDRESS = "127.0.0.1"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=1024)
def ip_of(host: str) -> Address | None:
    """The IP address a bare host spells, or None (a name, brackets, a port, garbage).

    Remembered (a pure parse of an immutable value): the observer asks it of every
    listener and every probe's host, the same few hosts every pass.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """Is this bare host (no brackets, no port) loopback only?"""
    if host == LOCALHOST:
        return True
    ip = ip_of(host)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1 (Python < 3.13 says no)
    return ip.is_loopback


def split_host_port(text: str) -> tuple[str, str] | None:
    """``host:port`` / ``[v6]:port`` → (host without brackets, port text), else None.

    The port text is not checked here (callers say what is wrong with it). An
    unbracketed host with a colon of its own is not split: ``::1:8080`` is
    an IPv6 address, not ``::1`` and a port.
    """
    if text.startswith("["):
        inside, closed, rest = text[1:].partition("]")
        return (inside, rest[1:]) if closed and rest.startswith(":") else None
    host, sep, port = text.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def host_of(text: str) -> str | None:
    """The host ``text`` names (a host, ``[v6]``, ``host:port``, ``[v6]:port``); None if malformed."""
    if text == LOCALHOST or ip_of(text) is not None:
        return text  # a bare host (a bare IPv6 address has colons of its own)
    if text.startswith("[") and text.endswith("]"):
        return text[1:-1]
    split = split_host_port(text)
    if split is None or not (split[1].isascii() and split[1].isdigit()):
        return None
    return split[0]


def is_loopback(text: str) -> bool:
    """Is this host, address or listener (``host:port``, ``[v6]:port``) loopback only?"""
    host = host_of(text)
    return host is not None and is_loopback_host(host)


def normal_host(host: str) -> str:
    """A loopback host as an address: ``localhost`` → 127.0.0.1, an IP in its short form."""
    if host == LOCALHOST:
        return LOCALHOST_ADDRESS
    ip = ip_of(host)
    return str(ip) if ip is not None else host
