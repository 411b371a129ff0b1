"""§14 an mlx-lm server's own version, read from the running process (SHELL: /proc, files).

``mlx_lm.server`` answers no version over HTTP (its ``/v1/models`` and ``/health`` carry
none), so the version checked against its Program's ``version`` is that of the ``mlx_lm``
package the running server imports: the ``Version:`` of the ``mlx_lm-*.dist-info`` in the
``site-packages`` folder whose ``mlx`` native libraries the process has mapped
(``/proc/PID/maps``). That is the interpreter environment really running — a venv, the
system's, whatever ``PYTHONPATH`` put first — not the one the Program's files would
suggest. Nothing found (another layout, the process gone, no dist-info): None, and the
version is said as not confirmed.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from reconciler.core.observed import Health, ProbeFacts, ProcessFacts

#: The folder of a mapped file of the ``mlx`` package: ``…/site-packages/mlx/…``.
_MARKERS = ("/site-packages/mlx/", "/dist-packages/mlx/")


def site_of(pid: int) -> str | None:
    """The ``site-packages`` folder whose ``mlx`` the process ``pid`` has mapped; None."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                for marker in _MARKERS:
                    at = line.find(marker)
                    if at >= 0:
                        start = line.find("/")
                        return line[start:at + len(marker) - len("mlx/")]
    except OSError:
        return None
    return None


def dist_version(site: str, project: str) -> str | None:
    """``Version:`` of ``project``'s dist-info in ``site`` (``mlx_lm`` → ``0.32.2``); None."""
    prefix = project.replace("-", "_") + "-"
    try:
        names = sorted(n for n in os.listdir(site)
                       if n.startswith(prefix) and n.endswith(".dist-info"))
    except OSError:
        return None
    for name in names:
        try:
            with open(Path(site, name, "METADATA"), encoding="utf-8", errors="replace") as meta:
                for line in meta:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip() or None
                    if not line.strip():
                        break  # the headers end at the first empty line
        except OSError:
            continue
    return None


def mlx_lm(pid: int) -> str | None:
    """The version of the mlx-lm the running server ``pid`` imports (see the docstring)."""
    site = site_of(pid)
    return dist_version(site, "mlx_lm") if site is not None else None


def observed(facts: ProbeFacts, process: ProcessFacts | None) -> ProbeFacts:
    """``facts`` with the version of our live, answering mlx-lm server (``unknown`` when it
    cannot be read: said as not confirmed); a stranger's process is never read."""
    if (facts.health is not Health.UP or process is None or not process.owned
            or not process.alive):
        return facts
    return attrs.evolve(facts, version=mlx_lm(process.pid) or "unknown")
