"""The machine's listening TCP sockets on Linux: inode → ``host:port`` (SHELL).

``linux.Listeners.by_group`` matches these inodes against the fds of our
process groups. Only LISTEN sockets are wanted, so they are asked for by
state: one ``sock_diag`` netlink dump per address family (what ``ss -tl``
does), in which the kernel itself keeps only the listeners. Reading
``/proc/net/tcp{,6}`` instead has the kernel print every socket of the
machine and this process parse each line: with the ~10,000 TIME_WAIT sockets
a busy machine keeps, ~20 ms of kernel time and ~15 ms of parsing a pass,
against ~0.1 ms for the dump. When netlink cannot be used (a sandbox that
forbids it, a kernel without ``sock_diag``) the ``/proc`` tables are read as
before; both give the same mapping (tests/platform/test_sockdiag.py).
"""

from __future__ import annotations

import os
import socket
import struct

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10  # "0A" in /proc/net/tcp's st column
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
# inet_diag_msg after the header: family, state, timer, retrans; the socket id
# (sport, dport big-endian; src, dst 16 bytes each; interface; cookie); then
# expires, rqueue, wqueue, uid, inode.
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")


def listening_inodes() -> dict[str, str]:
    """inode → ``host:port`` (``[host]:port`` for IPv6) of every LISTEN TCP socket.

    Raises OSError only when neither netlink nor ``/proc/net/tcp`` can be read.
    """
    try:
        return {**_dump(socket.AF_INET), **_dump(socket.AF_INET6)}
    except OSError:
        return proc_net_tcp()


def _dump(family: int) -> dict[str, str]:
    """One ``SOCK_DIAG_BY_FAMILY`` dump of ``family``'s TCP sockets in state LISTEN."""
    # inet_diag_req_v2: family, protocol, ext, pad, states; a zero socket id (all).
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN) + bytes(48)
    header = _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY,
                          _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    out: dict[str, str] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                       _NETLINK_SOCK_DIAG) as sock:
        sock.sendto(header + request, (0, 0))
        while True:
            data = sock.recv(65536)
            if not data:
                raise OSError("sock_diag: the dump ended without NLMSG_DONE")
            at = 0
            while at + _HEADER.size <= len(data):
                length, kind = _HEADER.unpack_from(data, at)[:2]
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, at + _HEADER.size)
                    raise OSError(-err, os.strerror(-err))
                if length < _HEADER.size + _MSG.size:
                    raise OSError("sock_diag: a short message")
                fields = _MSG.unpack_from(data, at + _HEADER.size)
                fam, state, sport, src, inode = fields[0], fields[1], fields[4], fields[6], fields[14]
                if state == _TCP_LISTEN:
                    port = int.from_bytes(sport, "big")
                    if fam == socket.AF_INET6:
                        out[str(inode)] = f"[{socket.inet_ntop(fam, src)}]:{port}"
                    else:
                        out[str(inode)] = f"{socket.inet_ntop(fam, src[:4])}:{port}"
                at += (length + 3) & ~3


def proc_net_tcp() -> dict[str, str]:
    """``listening_inodes`` from ``/proc/net/tcp`` and ``tcp6`` (netlink's fallback)."""
    out: dict[str, str] = {}
    for table, six in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != "0A":
                        continue
                    host_hex, port_hex = fields[1].split(":")
                    host = _ipv6(host_hex) if six else _ipv4(host_hex)
                    port = int(port_hex, 16)
                    out[fields[9]] = f"[{host}]:{port}" if six else f"{host}:{port}"
        except FileNotFoundError:
            continue  # no IPv6 on this kernel
    return out


def _ipv4(word: str) -> str:
    return socket.inet_ntop(socket.AF_INET, bytes.fromhex(word)[::-1])


def _ipv6(words: str) -> str:
    # Four 32-bit words, each in host (little-endian) byte order.
    raw = b"".join(bytes.fromhex(words[i:i + 8])[::-1] for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, raw)
