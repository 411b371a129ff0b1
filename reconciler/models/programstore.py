"""A Program's files checked against their digests right before every start (SHELL; §14).

``check(program, stamps)`` is asked by the pass's hooks right before each
spawn of a role that runs a Program: every file must lie inside the
Program's root, be a regular file, and hash to its declared sha256.

* **Stamps, then a rehash.** Each file's stamp ``(size, mtime_ns, inode,
  ctime_ns, dev)`` is kept with the digest it hashed to, in the store's
  stamps table beside the Models' (§1.1), under ``program/<name>`` (``/`` is
  in no Model name). A file whose stamp is the stored one is not read again;
  any other is hashed in full. No first-in-process rehash, unlike a Model's
  (§1.1): a binary is small, ctime cannot be set back without root, and a
  ``--once`` run every minute would otherwise hash it every minute.
* **The digest it hashed to is kept, match or not**, so a changed file keeps
  refusing on its stamp alone (both digests named) until it changes again —
  put back, it hashes anew and passes.
* **The planner knows.** Each pass looks at every Program a managed role runs
  (``refreshed``: a stat per file, a rehash of a file whose stamp moved), and
  a changed one is a ``program/<name>`` mismatch among the Models' checks: the
  planner refuses the role itself (``program_unverified``, one event), so no
  start is tried; put back, the next pass clears it. The check right before
  the spawn is then the last word (the same stamps: a stat per file).
* **Containment and care** as for Models (``modelstore``): the declared path
  is resolved in the canonical root and must stay inside it; ``hash_file``
  never follows a final link and never blocks on a FIFO.
"""

from __future__ import annotations

import os
import stat

import attrs

from reconciler.core.desired import Desired, ProgramSpec, program_key
from reconciler.manifests.modeldoc import is_safe_relpath
from reconciler.models.modelstore import NotRegularFile, Stamp, StampStore, hash_file


@attrs.frozen(kw_only=True)
class ProgramCheck:
    ok: bool
    detail: str = ""
    hashed: int = 0  # bytes read this time (0: every stamp matched)


def refreshed(desired: Desired, stamps: StampStore, sticky: dict[str, str], *,
              record: bool) -> dict[str, str]:
    """The sticky mismatches, with every Program a managed role runs looked at now (stats;
    a file whose stamp moved is hashed), so that the planner refuses a changed Program
    before any start is tried, and no longer once it is put back (§14)."""
    out = dict(sticky)
    for program in {p for r in desired.roles if r.managed and (p := desired.program_for(r))}:
        if program.source is not None and not os.path.isdir(program.root or ""):
            continue  # not fetched yet: the fetch rung waits for it (or refuses, no fetch)
        got = check(program, stamps, record=record)
        if not got.ok:
            out[program_key(program.name)] = got.detail
    return out


def check(program: ProgramSpec, stamps: StampStore, *, record: bool = True) -> ProgramCheck:
    """Are ``program``'s files exactly the declared ones? The stamps (each with the digest
    its file hashed to, match or not) are kept unless ``record`` is False (a plan)."""
    name = program.name
    if program.root is None:
        return ProgramCheck(ok=False, detail=(
            f"program {name} is not on this node: its source is fetched only by a node "
            "with spec.fetch"))
    try:
        real_root = os.path.realpath(program.root)
        if not stat.S_ISDIR(os.stat(real_root).st_mode):
            return ProgramCheck(ok=False, detail=f"program {name}: root {program.root} is "
                                                 "not a directory")
    except OSError as exc:
        return ProgramCheck(ok=False, detail=f"program {name}: root {program.root}: "
                                             f"{exc.strerror or exc}")
    key = program_key(name)
    old = stamps.get_stamps(key)
    new: dict[str, Stamp] = {}
    hashed = 0
    refusal = ""
    for f in program.files:
        what = f"program {name}: {f.path}"
        real = os.path.realpath(os.path.join(real_root, f.path))
        if not is_safe_relpath(f.path) or os.path.commonpath([real, real_root]) != real_root:
            refusal = f"{what} resolves outside the program's root {program.root}"
            break
        try:
            st = os.stat(real)
        except OSError as exc:
            refusal = (f"{what} is missing ({exc.strerror or exc}); the Program says "
                       f"sha256 {f.sha256}")
            break
        prev = old.get(f.path)
        if prev is not None and prev.same_file(st):
            new[f.path] = prev
            digest = prev.sha256
        else:
            try:
                got = hash_file(real)
            except NotRegularFile:
                refusal = f"{what} is not a regular file"
                break
            except OSError as exc:
                refusal = f"{what} cannot be read: {exc.strerror or exc}"
                break
            hashed += got.stamp.size
            digest = got.stamp.sha256
            if got.stable:
                new[f.path] = got.stamp
        if digest != f.sha256:
            refusal = (f"{what} has changed: its sha256 is {digest}, the Program says "
                       f"{f.sha256}; not started")
            break
    declared = {f.path for f in program.files}
    kept = {p: s for p, s in old.items() if p in declared} | new
    if kept != old and record:
        stamps.put_stamps(key, kept)
    return ProgramCheck(ok=not refusal, detail=refusal, hashed=hashed)
