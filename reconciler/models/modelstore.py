"""Model files on disk: hashing, stamps, containment, verification (SHELL).

BEHAVIOUR §1.1: a model is usable only when every file exists inside its
``root``, has the declared size and hashes to the declared digest.

* **Containment.** A file's path is joined to the canonical root and fully
  resolved; the result must lie inside the root. One exception: a Hugging Face
  cache snapshot (``…/models--org--name/snapshots/<rev>``) links its files into
  its own ``…/models--org--name/blobs/``, so that directory counts as inside.
* **Never block, never touch a device.** A file is ``stat``-ed before it is
  opened and must be a regular file; it is then opened ``O_NONBLOCK |
  O_NOFOLLOW`` and checked again with ``fstat`` (a FIFO swapped in between
  cannot hang the reconciler).
* **Stamps.** After a file hashes, its stamp ``(size, mtime_ns, inode,
  ctime_ns, dev)`` and digest are stored. The first check of a model in a
  process (and ``--full``) hashes every byte; later checks re-hash only files
  whose stamp changed. §1.1 names a ``(size, mtime_ns, inode)`` stamp; this one
  is deliberately stronger: a file rewritten in place with its mtime put back
  (``touch -d``, ``os.utime``) keeps those three, but not its ctime, which
  only root or a clock change can set back; and a different device means a
  different file whatever its inode number. Stamps stored before ctime and
  device were recorded never match, so such a file is simply re-hashed once.
* **Sticky mismatch.** A mismatch is recorded and keeps the model refused,
  without re-hashing, until a full verification passes.
* **Detached.** A root that is not there (or an empty directory, as an
  unmounted drive's mount point is) is ``DETACHED``, not a mismatch; a root
  that exists but is not a directory is a mismatch.
* **Ollama** models have no files here: Ollama keeps and checks its own
  blobs, and the runtime checks the tag is pulled. They verify trivially.

Size: one safety rule (a model file is what its manifest says): hashing,
stamps, containment and the Verifier share the same careful opening of files.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import Iterator, Protocol

import attrs

from reconciler.core.desired import ModelFile, ModelFormat, ModelSpec
from reconciler.core.observed import ModelCheck, ModelState
from reconciler.manifests.modeldoc import is_safe_relpath

#: Read size for hashing: large enough that syscalls do not show, small enough to stay cached.
HASH_BUFFER = 1 << 20

DETACHED_DETAIL = "model store is detached"

#: stat() errors of a root that is simply not there (unmounted, stale network mount).
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ESTALE, errno.EIO, errno.ENODEV,
                   errno.ENXIO})


@attrs.frozen(kw_only=True)
class Stamp:
    """What a file looked like when it last hashed to ``sha256``."""

    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int  # changes on any write, chmod or utime; cannot be set back by a user
    dev: int
    sha256: str

    def same_file(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.inode, self.ctime_ns, self.dev) == (
            st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_dev)

    @classmethod
    def of(cls, st: os.stat_result, sha256: str) -> "Stamp":
        """The stamp of a file as ``st`` describes it, with its digest."""
        return cls(size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino,
                   ctime_ns=st.st_ctime_ns, dev=st.st_dev, sha256=sha256)


class StampStore(Protocol):
    """Persistence the verifier needs (the state store implements it on SQLite)."""

    def get_stamps(self, model: str) -> dict[str, Stamp]:
        """Stamps by file path (relative to the root, as in the manifest); {} if none."""

    def put_stamps(self, model: str, stamps: dict[str, Stamp]) -> None:
        """Replace all of a model's stamps with these."""

    def get_sticky(self, model: str) -> str | None:
        """The recorded mismatch detail, or None."""

    def set_sticky(self, model: str, detail: str | None) -> None:
        """Record a mismatch (a detail) or clear it (None)."""


class MemoryStampStore:
    """A ``StampStore`` in a dict, for tests and for runs without a state store."""

    def __init__(self) -> None:
        self.stamps: dict[str, dict[str, Stamp]] = {}
        self.sticky: dict[str, str] = {}

    def get_stamps(self, model: str) -> dict[str, Stamp]:
        return dict(self.stamps.get(model, {}))

    def put_stamps(self, model: str, stamps: dict[str, Stamp]) -> None:
        self.stamps[model] = dict(stamps)

    def get_sticky(self, model: str) -> str | None:
        return self.sticky.get(model)

    def set_sticky(self, model: str, detail: str | None) -> None:
        if detail is None:
            self.sticky.pop(model, None)
        else:
            self.sticky[model] = detail


class NotRegularFile(OSError):
    """Raised by ``hash_file`` for a FIFO, device, socket or directory."""


class ModelPathError(ValueError):
    """A model's files failed the containment re-check right before a start."""


# ---------------------------------------------------------------- hashing


@attrs.frozen(kw_only=True)
class Hashed:
    stamp: Stamp  # from fstat before reading, with the digest
    stable: bool  # the file's stamp did not change while it was read


def hash_file(path: str, *, buffer_size: int = HASH_BUFFER) -> Hashed:
    """Stream sha256 of a regular file; never follows a final symlink, never blocks.

    Raises ``NotRegularFile`` or another ``OSError``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", path)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        digest = hashlib.sha256()
        view = memoryview(bytearray(buffer_size))
        with open(fd, "rb", buffering=0, closefd=False) as f:
            while n := f.readinto(view):
                digest.update(view[:n])
        after = os.fstat(fd)
    finally:
        os.close(fd)
    stamp = Stamp.of(before, digest.hexdigest())
    return Hashed(stamp=stamp, stable=stamp.same_file(after))


# ---------------------------------------------------------------- containment


def allowed_roots(real_root: str) -> tuple[str, ...]:
    """Where a canonical root's files may resolve: the root, plus an HF snapshot's blobs/."""
    parent = os.path.dirname(real_root)
    if os.path.basename(parent) == "snapshots":
        blobs = os.path.join(os.path.dirname(parent), "blobs")
        if os.path.isdir(blobs) and not os.path.islink(blobs):
            return (real_root, blobs)
    return (real_root,)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(os.path.commonpath([path, r]) == r for r in roots)


def _labelled(spec: ModelSpec) -> Iterator[tuple[str, ModelFile]]:
    yield from (("shard", f) for f in spec.shards)
    if spec.tokenizer is not None:
        yield "tokenizer", spec.tokenizer
    if spec.template is not None:
        yield "template", spec.template


def locate(
    model: str, real_root: str, roots: tuple[str, ...], label: str, f: ModelFile
) -> tuple[str, os.stat_result] | ModelCheck:
    """The resolved path and stat of one declared file, or why it cannot be used."""
    what = f"model {model}: {label} {f.path}"

    def problem(state: ModelState, text: str) -> ModelCheck:
        return ModelCheck(name=model, state=state, detail=f"{what} {text}")

    if not is_safe_relpath(f.path):
        return problem(ModelState.MISMATCH, "resolves outside the model root")
    real = os.path.realpath(os.path.join(real_root, f.path))
    if not _inside(real, roots):
        return problem(ModelState.MISMATCH, "resolves outside the model root")
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return problem(ModelState.MISSING, "is missing")
    except OSError as e:
        if e.errno == errno.ELOOP:
            return problem(ModelState.MISMATCH, "is a symlink loop")
        return problem(ModelState.MISSING, f"cannot be read: {e.strerror}")
    if not stat.S_ISREG(st.st_mode):
        return problem(ModelState.MISMATCH, "is not a regular file")
    if f.size is not None and st.st_size != f.size:
        return problem(ModelState.MISMATCH, f"size {st.st_size} != declared {f.size}")
    return real, st


def _open_root(spec: ModelSpec) -> str | ModelCheck:
    """The canonical root directory, or DETACHED / MISMATCH."""
    root = spec.root or ""
    if not os.path.isabs(root):
        return ModelCheck(name=spec.name, state=ModelState.MISMATCH,
                          detail=f"model {spec.name}: root {root!r} is not an absolute path")
    try:
        st = os.stat(root)
    except OSError as e:
        if e.errno in _GONE:
            return ModelCheck(name=spec.name, state=ModelState.DETACHED,
                              detail=f"{DETACHED_DETAIL} ({root}: {e.strerror})")
        state = ModelState.MISMATCH if e.errno == errno.ELOOP else ModelState.MISSING
        return ModelCheck(name=spec.name, state=state,
                          detail=f"model {spec.name}: root {root} cannot be used: {e.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        return ModelCheck(name=spec.name, state=ModelState.MISMATCH,
                          detail=f"model {spec.name}: root {root} is not a directory")
    return os.path.realpath(root)


def _is_empty_dir(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return next(it, None) is None
    except OSError:
        return True


def canonical_root(spec: ModelSpec) -> str:
    """The canonical root directory (for mlx-lm's ``--model``); ``ModelPathError`` if unusable."""
    opened = _open_root(spec)
    if isinstance(opened, ModelCheck):
        raise ModelPathError(opened.detail)
    return opened


def canonical_paths(spec: ModelSpec) -> tuple[str, ...]:
    """Absolute paths of every file (shards in order, then tokenizer, template), re-checked.

    Each is ``<canonical root>/<declared path>``; its full resolution must still
    be inside the root, a regular file of the declared size. Raises
    ``ModelPathError`` otherwise. Ollama models have no paths: ``()``.
    """
    if spec.format is ModelFormat.OLLAMA:
        return ()
    real_root = canonical_root(spec)
    roots = allowed_roots(real_root)
    out = []
    for label, f in _labelled(spec):
        found = locate(spec.name, real_root, roots, label, f)
        if isinstance(found, ModelCheck):
            raise ModelPathError(found.detail)
        out.append(os.path.join(real_root, f.path))
    return tuple(out)


# ---------------------------------------------------------------- verification


def verify_model(
    spec: ModelSpec, stamps: StampStore, *, full: bool, first_in_process: bool
) -> ModelCheck:
    """Check one model's files (BEHAVIOUR §1.1); record stamps and sticky mismatches."""
    if spec.format is ModelFormat.OLLAMA:
        return ModelCheck(name=spec.name, state=ModelState.VERIFIED,
                          detail="Ollama keeps its own blobs")
    sticky = stamps.get_sticky(spec.name)
    if sticky is not None and not full:
        return ModelCheck(name=spec.name, state=ModelState.MISMATCH, detail=sticky)
    check = _check_files(spec, stamps, rehash=full or first_in_process)
    if check.state is ModelState.MISMATCH:
        stamps.set_sticky(spec.name, check.detail)
    elif check.state is ModelState.VERIFIED and sticky is not None:
        stamps.set_sticky(spec.name, None)
    return check


def _check_files(spec: ModelSpec, stamps: StampStore, *, rehash: bool) -> ModelCheck:
    name = spec.name
    opened = _open_root(spec)
    if isinstance(opened, ModelCheck):
        return opened
    real_root, roots = opened, allowed_roots(opened)
    found = [(label, f, locate(name, real_root, roots, label, f)) for label, f in _labelled(spec)]
    problems = [r for _, _, r in found if isinstance(r, ModelCheck)]
    if problems:
        if all(p.state is ModelState.MISSING for p in problems) and _is_empty_dir(real_root):
            return ModelCheck(name=name, state=ModelState.DETACHED,
                              detail=f"{DETACHED_DETAIL} ({spec.root} is empty)")
        mismatches = [p for p in problems if p.state is ModelState.MISMATCH]
        return (mismatches or problems)[0]
    old = stamps.get_stamps(name)
    new: dict[str, Stamp] = {}
    for label, f, (real, st) in found:  # type: ignore[misc]
        prev = old.get(f.path)
        if not rehash and prev is not None and prev.sha256 == f.sha256 and prev.same_file(st):
            new[f.path] = prev
            continue
        what = f"model {name}: {label} {f.path}"
        try:
            hashed = hash_file(real)
        except NotRegularFile:
            return ModelCheck(name=name, state=ModelState.MISMATCH,
                              detail=f"{what} is not a regular file")
        except OSError as e:
            return ModelCheck(name=name, state=ModelState.MISSING,
                              detail=f"{what} cannot be read: {e.strerror}")
        if hashed.stamp.sha256 != f.sha256:
            return ModelCheck(name=name, state=ModelState.MISMATCH,
                              detail=f"{what} hash mismatch")
        if hashed.stable:
            new[f.path] = hashed.stamp
    if new != old:
        stamps.put_stamps(name, new)
    return ModelCheck(name=name, state=ModelState.VERIFIED)


class Verifier:
    """One per process: remembers which models were already fully hashed here."""

    def __init__(self, stamps: StampStore) -> None:
        self.stamps = stamps
        self._checked: set[ModelSpec] = set()

    def verify(self, spec: ModelSpec, full: bool = False) -> ModelCheck:
        check = verify_model(spec, self.stamps, full=full,
                             first_in_process=spec not in self._checked)
        if check.state is ModelState.VERIFIED:
            self._checked.add(spec)
        else:
            self._checked.discard(spec)
        return check
