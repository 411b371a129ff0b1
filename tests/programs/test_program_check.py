"""§14 checked at every start: a Program's files against their digests, by stamp then rehash."""

from __future__ import annotations

import hashlib
import os

import attrs
import pytest

from reconciler.core.desired import ModelFile, ProgramSpec, Runtime
from reconciler.models import programstore
from reconciler.models.modelstore import MemoryStampStore


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def release(tmp_path):
    """A release-like tree: bin/llama-server and a library beside it."""
    root = tmp_path / "llama"
    (root / "bin").mkdir(parents=True)
    files = {"bin/llama-server": b"\x7fELF server" * 100, "lib/libggml.so": b"\x7fELF lib" * 50}
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    program = ProgramSpec(name="llama-b1", runtime=Runtime.LLAMACPP, version="b1",
                          entrypoint="bin/llama-server", root=str(root),
                          files=tuple(ModelFile(path=p, sha256=sha(d), size=len(d))
                                      for p, d in sorted(files.items())))
    return program, root


def test_unchanged_files_pass_on_their_stamps_without_reading_them(release):
    """§14: the first check hashes every file; later ones only stat them (nothing changed)."""
    program, _ = release
    stamps = MemoryStampStore()
    first = programstore.check(program, stamps)
    assert first.ok and first.hashed == 1500
    assert set(stamps.get_stamps("program/llama-b1")) == {"bin/llama-server", "lib/libggml.so"}
    again = programstore.check(program, stamps)
    assert again.ok and again.hashed == 0


def test_one_byte_appended_refuses_naming_both_digests_until_put_back(release):
    """§14: a changed file refuses the start with its digest and the Program's; the refusal
    holds on its stamp alone; put back, the file hashes again and passes."""
    program, root = release
    stamps = MemoryStampStore()
    assert programstore.check(program, stamps).ok
    exe = root / "bin" / "llama-server"
    original = exe.read_bytes()
    with open(exe, "ab") as f:
        f.write(b"\0")
    refused = programstore.check(program, stamps)
    assert not refused.ok and refused.hashed == len(original) + 1
    changed = sha(original + bytes(1))
    assert refused.detail == (
        f"program llama-b1: bin/llama-server has changed: its sha256 is {changed}, "
        f"the Program says {sha(original)}; not started")
    still = programstore.check(program, stamps)
    assert (still.ok, still.detail, still.hashed) == (False, refused.detail, 0)
    exe.write_bytes(original)
    assert programstore.check(program, stamps).ok


def test_a_rewrite_with_its_mtime_put_back_is_still_rehashed(release):
    """§14 the stamp holds ctime: same size, same mtime (os.utime) is still a changed file."""
    program, root = release
    stamps = MemoryStampStore()
    assert programstore.check(program, stamps).ok
    lib = root / "lib" / "libggml.so"
    st = lib.stat()
    data = bytearray(lib.read_bytes())
    data[0] ^= 1
    with open(lib, "r+b") as f:
        f.write(bytes(data))
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    refused = programstore.check(program, stamps)
    assert not refused.ok and "lib/libggml.so has changed" in refused.detail


def test_missing_escaping_and_absent_roots_refuse(release, tmp_path):
    """§14: a missing file (its declared digest named), a link out of the root, and a Program
    without a root on this node all refuse."""
    program, root = release
    (root / "lib" / "libggml.so").unlink()
    missing = programstore.check(program, MemoryStampStore())
    assert not missing.ok and missing.detail.startswith(
        "program llama-b1: lib/libggml.so is missing") and program.files[1].sha256 in missing.detail
    (tmp_path / "elsewhere.so").write_bytes(b"x")
    (root / "lib" / "libggml.so").symlink_to(tmp_path / "elsewhere.so")
    out = programstore.check(program, MemoryStampStore())
    assert not out.ok and "resolves outside the program's root" in out.detail
    nowhere = programstore.check(attrs.evolve(program, root=None), MemoryStampStore())
    assert not nowhere.ok and "is not on this node" in nowhere.detail
