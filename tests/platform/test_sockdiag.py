"""The Linux listening-socket table (platform/sockdiag.py): netlink's dump and /proc's tables agree."""

from __future__ import annotations

import os
import socket

import sys

import pytest

from reconciler.world import procs

if sys.platform.startswith("linux"):
    from reconciler.platform import sockdiag as listeners

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sock_diag is Linux's")


def _inode(sock: socket.socket) -> str:
    return str(os.fstat(sock.fileno()).st_ino)


@pytest.fixture
def sockets():
    """A listener on 127.0.0.1 (and on ::1 when the host has IPv6), and a connected pair."""
    made = []
    v4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    made.append(v4)
    v6 = None
    if socket.has_ipv6:
        try:
            v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            v6.bind(("::1", 0))
            v6.listen()
            made.append(v6)
        except OSError:
            v6 = None
    client = socket.create_connection(v4.getsockname())
    server, _ = v4.accept()
    made += [client, server]
    yield v4, v6, client, server
    for s in made:
        s.close()


def test_the_dump_finds_our_listeners_and_only_listeners(sockets) -> None:
    """§5 the socket dump finds each listening socket by inode with its address (v4 and v6), and no
    established one."""
    v4, v6, client, server = sockets
    table = listeners.listening_inodes()
    assert table[_inode(v4)] == f"127.0.0.1:{v4.getsockname()[1]}"
    if v6 is not None:
        assert table[_inode(v6)] == f"[::1]:{v6.getsockname()[1]}"
    assert _inode(client) not in table and _inode(server) not in table  # ESTABLISHED


def test_netlink_and_proc_net_tcp_agree(sockets) -> None:
    """Same inodes, same addresses, however the table was read (a listener may come or go
    between the two reads on a shared machine: only ours must be in both, and the rest
    agree where both have it)."""
    via_netlink = listeners._dump(socket.AF_INET)
    if socket.has_ipv6 and os.path.exists("/proc/net/tcp6"):
        via_netlink |= listeners._dump(socket.AF_INET6)
    via_proc = listeners.proc_net_tcp()
    v4, v6, _, _ = sockets
    ours = {_inode(v4)} | ({_inode(v6)} if v6 is not None else set())
    assert ours <= via_netlink.keys() & via_proc.keys()
    both = via_netlink.keys() & via_proc.keys()
    assert {k: via_netlink[k] for k in both} == {k: via_proc[k] for k in both}
    assert len(both) >= max(len(via_netlink), len(via_proc)) - 2  # (churn, not a mismatch)


def test_without_netlink_the_proc_tables_are_read(sockets, monkeypatch) -> None:
    """A sandbox that forbids netlink sockets: the same listeners, from /proc/net/tcp."""
    real = socket.socket

    def no_netlink(family=-1, *args, **kwargs):
        if family == socket.AF_NETLINK:
            raise PermissionError(1, "Operation not permitted")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(listeners.socket, "socket", no_netlink)
    calls = []
    monkeypatch.setattr(listeners, "proc_net_tcp",
                        lambda real_read=listeners.proc_net_tcp: calls.append(1) or real_read())
    v4, _, _, _ = sockets
    assert listeners.listening_inodes()[_inode(v4)] == f"127.0.0.1:{v4.getsockname()[1]}"
    assert calls == [1]


def test_a_process_groups_listeners_come_from_the_table(sockets) -> None:
    """procs.listeners_by_group: this process's own group holds the listeners made above."""
    v4, v6, _, _ = sockets
    found = procs.listeners_by_group([os.getpgid(0)])
    assert found is not None
    assert f"127.0.0.1:{v4.getsockname()[1]}" in found[os.getpgid(0)]
    if v6 is not None:
        assert f"[::1]:{v6.getsockname()[1]}" in found[os.getpgid(0)]
