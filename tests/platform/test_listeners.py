"""The listeners contract (``seam.Listeners``): a real loopback listener is found in its group.

§5 reads which addresses our servers listen on by their process group (each
server leads its own): a child's LISTEN socket is found under its group, with the
address it bound, and nothing that is not listening (its connected sockets) is.
"""

from __future__ import annotations

import os
import subprocess

from reconciler.platform.seam import Listeners

#: Listens on 127.0.0.1, connects to itself (an established pair), prints the port, waits.
SCRIPT = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
print(s.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_it_answers_the_protocol(platform):
    """Each implementation answers every method of the Protocol."""
    assert isinstance(platform.listeners, Listeners)


def test_a_child_s_listener_is_found_in_its_group(platform, spawn):
    """The child's one LISTEN socket, by its group, exactly (not its connected sockets)."""
    child = spawn(SCRIPT, stdout=subprocess.PIPE)
    port = int(child.stdout.readline())
    found = platform.listeners.by_group([child.pid])
    assert found is not None, "the table cannot be read here"
    assert found == {child.pid: (f"127.0.0.1:{port}",)}


def test_no_group_asked_is_nothing(platform):
    """No group asked: nothing read, an empty answer."""
    assert platform.listeners.by_group([]) == {}


def test_a_group_without_listeners_has_none(platform, spawn):
    """A group that listens on nothing has no addresses (absent or empty)."""
    child = spawn()
    found = platform.listeners.by_group([child.pid])
    assert found is not None and not found.get(child.pid)
    assert os.getpgid(0) not in found


def test_interface_addresses_include_loopback(platform):
    """The machine's addresses: at least 127.0.0.1, sorted, without scope ids."""
    addresses = platform.listeners.interface_addresses()
    assert "127.0.0.1" in addresses and list(addresses) == sorted(addresses)
    assert not any("%" in a for a in addresses)
