"""Which platform implementation this process uses: ``RECONCILER_PLATFORM`` (SHELL).

``linux`` (pidfds, sock_diag, ``/proc``, ``/dev/kmsg``: ``linux.py``),
``portable`` (psutil alone, exits polled: ``portable.py``) or ``macos``
(psutil's facts, exits through one kqueue: ``macos.py``). Unset or empty:
``linux`` on Linux, ``macos`` on macOS (``darwin``), ``portable`` elsewhere. Read once, on the first use, for
the life of the process; ``check`` is how ``cli`` refuses a wrong value up
front (one line, exit 1) rather than in the middle of a pass.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Mapping

from reconciler.core.errors import PlatformError

if TYPE_CHECKING:  # ``cli`` checks the setting before any command: nothing more imported
    from reconciler.platform.seam import Platform

ENV = "RECONCILER_PLATFORM"
NAMES = ("linux", "portable", "macos")
#: The system each implementation needs (``sys.platform``'s prefix); portable runs anywhere.
NEEDS = {"linux": "linux", "macos": "darwin"}


def default(system: str = sys.platform) -> str:
    if system.startswith("linux"):
        return "linux"
    return "macos" if system.startswith("darwin") else "portable"


def name(environ: Mapping[str, str] | None = None, system: str = sys.platform) -> str:
    """The implementation the setting names (checked), or the system's default."""
    env = os.environ if environ is None else environ
    wanted = env.get(ENV, "").strip()
    if not wanted:
        return default(system)
    if wanted not in NAMES:
        raise PlatformError(f"{ENV}={wanted!r}: expected one of {', '.join(NAMES)}")
    needs = NEEDS.get(wanted)
    if needs is not None and not system.startswith(needs):
        raise PlatformError(f"{ENV}={wanted} on {system}: use portable (or leave it unset)")
    return wanted


def check(environ: Mapping[str, str] | None = None) -> None:
    """Raise ``PlatformError`` now if the setting is wrong."""
    name(environ)


def build(which: str) -> Platform:
    """A fresh implementation by name (tests run the contract against each)."""
    if which == "linux":
        from reconciler.platform import linux

        return linux.platform()
    if which == "portable":
        from reconciler.platform import portable

        return portable.platform()
    if which == "macos":
        from reconciler.platform import macos

        return macos.platform()
    raise PlatformError(f"{ENV}={which!r}: expected one of {', '.join(NAMES)}")


@functools.cache
def current() -> Platform:
    """This process's implementation, chosen on first use."""
    return build(name())
