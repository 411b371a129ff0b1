"""§14 a running server's own report of its build against its Program's ``version`` (PURE).

llama.cpp reports ``/props`` ``build_info`` as ``b<number>-<commit>``; a Program's version
is ``b<number>``. A version of that shape is compared by its number, whatever the runtime. A build from a source tarball says ``b0``
(``build 0``) and a prebuilt wheel's ``b1`` with a commit (``version: 1 (571d0d5)``): no
number, so the version cannot be confirmed — said, never degraded. Other runtimes' versions
(mlx-lm's ``0.26.3``, read from the running server's own mlx_lm package, ``world/pkgversion``)
are compared as text; ``unknown`` (it could not be read) is not confirmed either.
"""

from __future__ import annotations

import re

from reconciler.core.desired import ProgramSpec

_BUILD = re.compile(r"^b?(\d+)(?:$|[-. (])")
_NUMBERED = re.compile(r"^b(\d+)$")
#: What the observer reports for a server whose version it could not read (mlx-lm).
UNKNOWN = "unknown"


def check(program: ProgramSpec | None, reported: str | None) -> tuple[bool, str] | None:
    """None: nothing to say (no Program, no report, the same version). ``(True, why)``: the
    server runs another version (degraded). ``(False, why)``: it could not be confirmed."""
    if program is None or reported is None:
        return None
    want = program.version
    mine = _NUMBERED.match(want)
    if mine is not None:  # a build number (llama.cpp's b11434): compared as a number
        theirs = _BUILD.match(reported)
        if theirs is None or int(theirs[1]) <= 1:
            return False, (f"program {program.name} version {want} not confirmed: the server "
                           f"reports build {reported!r}, no build number")
        if int(mine[1]) == int(theirs[1]):
            return None
    elif reported.strip() == want:
        return None
    elif reported.strip() in ("", UNKNOWN):
        return False, (f"program {program.name} version {want} not confirmed: the server's "
                       "version could not be read")
    return True, (f"program {program.name} is version {want}, the server reports {reported}: "
                  "another build runs than the one pinned")
