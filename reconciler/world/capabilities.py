"""What this node can run: serve programs and version probes (SHELL).

Serve programs are "configured, never guessed" (BEHAVIOUR §1.3): the path
NodeConfig names must be absolute, exist, be an executable regular file and
not be writable by group or others. A version probe runs the configured argv
with a cleared environment, stdin from /dev/null and a 5 s timeout; exit 0
passes and the first stdout line is the version (the first stderr line
when stdout is empty: llama-server prints its version there).
"""

from __future__ import annotations

import os
import stat
from typing import Sequence

import attrs

from reconciler.system import programs
from reconciler import runtimes
from reconciler.core.desired import NodeConfig, ProgramSpec, RunAs, Runtime, is_program_path

VERSION_TIMEOUT = 5.0


@attrs.frozen(kw_only=True)
class Check:
    """One capability check: ok, or why not (and a version when one was read)."""

    ok: bool
    why: str = ""
    version: str | None = None


@attrs.frozen(kw_only=True)
class RuntimeCapability:
    runtime: Runtime
    program: str | None
    program_check: Check
    version_check: Check | None  # None: no version_probe configured

    @property
    def ok(self) -> bool:
        return self.program_check.ok and (self.version_check is None or self.version_check.ok)

    @property
    def why(self) -> str:
        reasons = [c.why for c in (self.program_check, self.version_check) if c and not c.ok]
        return "; ".join(reasons)


def _pinned(name: str, programs: tuple[ProgramSpec, ...]) -> tuple[str, Check]:
    """§14 ``NAME VERSION PATH`` of a Program, and its check: the path's, then its digests."""
    from reconciler.models import programstore
    from reconciler.models.modelstore import MemoryStampStore

    found = next((p for p in programs if p.name == name), None)
    if found is None or found.executable is None:
        return name, Check(ok=False, why=f"Program {name} is not on this node")
    checked = check_program(found.executable)
    if checked.ok:
        got = programstore.check(found, MemoryStampStore(), record=False)
        checked = checked if got.ok else Check(ok=False, why=got.detail)
    return f"{name} {found.version} {found.executable}", checked


def check_program(path: str | None) -> Check:
    """Absolute, existing, an executable regular file, not group/other writable."""
    if not path:
        return Check(ok=False, why="not configured (serve_programs)")
    if not os.path.isabs(path):
        return Check(ok=False, why=f"{path} is not an absolute path")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Check(ok=False, why=f"{path} does not exist")
    except OSError as exc:
        return Check(ok=False, why=f"{path}: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        return Check(ok=False, why=f"{path} is not a regular file")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return Check(
            ok=False,
            why=f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
        )
    if not os.access(path, os.X_OK):
        return Check(ok=False, why=f"{path} is not executable")
    return Check(ok=True)


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip()[:200] if text else ""


def run_version_probe(
    argv: Sequence[str], timeout: float = VERSION_TIMEOUT, run_as: RunAs | None = None
) -> Check:
    """Run the probe with env={} in its own session; exit 0 = pass.

    The program gets the checks a serve program gets (absolute, not group- or
    other-writable) and runs with the servers' privileges (``run_as``), never
    as a root reconciler: a version probe is configuration, not trust.
    """
    if not argv:
        return Check(ok=False, why="empty version_probe")
    program = check_program(argv[0])
    if not program.ok:
        return Check(ok=False, why=f"version_probe: {program.why}")
    if os.geteuid() != 0:
        run_as = None
    elif run_as is None:
        return Check(ok=False, why="version_probe not run: it would run as root (set run_as)")
    ran = programs.run(argv, env={}, timeout=timeout, cwd="/", run_as=run_as)
    if ran.returncode is None:
        return Check(ok=False, why=ran.failure)
    out, err = ran.stdout, ran.stderr
    if ran.returncode != 0:
        said = _first_line(err) or _first_line(out)
        return Check(
            ok=False, why=f"{argv[0]} exited {ran.returncode}" + (f": {said}" if said else "")
        )
    # The first stdout line; llama-server prints its version on stderr instead.
    return Check(ok=True, version=_first_line(out) or _first_line(err) or None)


def runtime_capabilities(node: NodeConfig, programs: tuple[ProgramSpec, ...] = ()
                         ) -> list[RuntimeCapability]:
    """The runtimes the reconciler launches: program and version checks (§14 a Program's
    files against their digests too: a changed byte is why its roles do not start)."""
    probes = dict(node.version_probe)
    out = []
    for runtime in (spec.runtime for spec in runtimes.launched()):
        program = node.serve_program(runtime)
        argv = probes.get(runtime)
        checked = check_program(program)
        if program is not None and not is_program_path(program):
            program, checked = _pinned(program, programs)
        out.append(RuntimeCapability(
            runtime=runtime,
            program=program,
            program_check=checked,
            version_check=run_version_probe(argv, run_as=node.run_as) if argv else None,
        ))
    return out
