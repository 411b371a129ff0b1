"""Verification of a model's files: first check, lazy re-checks, sticky mismatches."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs

from reconciler.models import modelstore
from reconciler.core.desired import ModelFormat, ModelSourceInfo, ModelSpec
from reconciler.core.observed import ModelState
from reconciler.models.modelstore import MemoryStampStore, Stamp, Verifier, hash_file, verify_model

from .conftest import make_spec

W1, W2 = b"a" * 5000, b"b" * 7000


def after_clock_tick(path: Path) -> None:
    """Return once a new ctime would differ from ``path``'s (the kernel's clock may be coarse)."""
    probe = path.with_name(".tick")
    probe.write_bytes(b"")
    before = path.stat().st_ctime_ns
    for _ in range(1_000_000):
        os.utime(probe)  # sets the ctime to the kernel's now
        if probe.stat().st_ctime_ns > before:
            break
    probe.unlink()


def tamper_keep_stamp(path: Path) -> None:
    """Flip one byte in place and put the mtime back: size, mtime and inode unchanged.

    The ctime moves (no user can set it back): that is what the stamp catches.
    """
    after_clock_tick(path)
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
        st.st_size, st.st_mtime_ns, st.st_ino)
    assert path.stat().st_ctime_ns != st.st_ctime_ns


def test_hash_file_matches_hashlib(tmp_path):
    """Streaming with a small buffer gives the same digest and a stamp of the file."""
    data = os.urandom(300_001)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    got = hash_file(str(p), buffer_size=4096)
    assert got.stamp.sha256 == hashlib.sha256(data).hexdigest()
    assert got.stamp.size == len(data) and got.stamp.inode == p.stat().st_ino
    assert got.stable


def test_good_model_verifies_and_records_stamps(tmp_path, verifier, stamps):
    """Every file hashes to its digest: VERIFIED, and each file's stamp is stored."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2}, tokenizer=("tokenizer.json", b"{}"))
    check = verifier.verify(spec)
    assert check.state is ModelState.VERIFIED, check.detail
    assert set(stamps.get_stamps("m")) == {"a.gguf", "b.gguf", "tokenizer.json"}
    assert stamps.get_stamps("m")["a.gguf"].sha256 == spec.shards[0].sha256


def test_first_check_in_a_process_hashes_everything(tmp_path, stamps, hashed):
    """Stamps left by an earlier process do not spare the first check's hashing."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    Verifier(stamps).verify(spec)
    hashed.clear()
    assert Verifier(stamps).verify(spec).state is ModelState.VERIFIED
    assert sorted(hashed) == ["a.gguf", "b.gguf"]


def test_later_checks_hash_nothing_when_stamps_hold(tmp_path, verifier, hashed):
    """A second check in the same process with unchanged files reads no bytes."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    verifier.verify(spec)
    hashed.clear()
    assert verifier.verify(spec).state is ModelState.VERIFIED
    assert hashed == []


def test_later_checks_rehash_only_the_changed_file(tmp_path, verifier, hashed):
    """A touched file (new mtime) is re-hashed; its neighbour is not."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    verifier.verify(spec)
    hashed.clear()
    st = (tmp_path / "m" / "b.gguf").stat()
    os.utime(tmp_path / "m" / "b.gguf", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert verifier.verify(spec).state is ModelState.VERIFIED
    assert hashed == ["b.gguf"]


def test_replaced_file_with_new_inode_is_caught_lazily(tmp_path, verifier):
    """Same size, new bytes written to a new inode: the lazy check re-hashes and refuses."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    verifier.verify(spec)
    p = tmp_path / "m" / "a.gguf"
    st = p.stat()
    (tmp_path / "m" / "new").write_bytes(b"z" * len(W1))
    os.replace(tmp_path / "m" / "new", p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    check = verifier.verify(spec)
    assert check.state is ModelState.MISMATCH
    assert check.detail == "model m: shard a.gguf hash mismatch"


def test_tamper_with_stamp_restored_is_caught_by_a_new_process(tmp_path, stamps):
    """Bytes changed in place with size and mtime restored: the next process's first check sees it."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    assert Verifier(stamps).verify(spec).state is ModelState.VERIFIED
    tamper_keep_stamp(tmp_path / "m" / "a.gguf")
    check = Verifier(stamps).verify(spec)
    assert (check.state, check.detail) == (ModelState.MISMATCH, "model m: shard a.gguf hash mismatch")


def test_tamper_with_mtime_restored_is_caught_by_the_lazy_check(tmp_path, verifier, hashed):
    """The same tamper within one process: the ctime moved, so the lazy check re-hashes and refuses."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    verifier.verify(spec)
    tamper_keep_stamp(tmp_path / "m" / "a.gguf")
    hashed.clear()
    check = verifier.verify(spec)
    assert (check.state, check.detail) == (ModelState.MISMATCH, "model m: shard a.gguf hash mismatch")
    assert hashed == ["a.gguf"]


def test_a_ctime_change_alone_is_re_hashed(tmp_path, verifier, hashed):
    """A chmod to the same mode moves only the ctime: the file is re-hashed (and still verifies)."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    verifier.verify(spec)
    p = tmp_path / "m" / "b.gguf"
    after_clock_tick(p)
    os.chmod(p, p.stat().st_mode & 0o7777)
    hashed.clear()
    assert verifier.verify(spec).state is ModelState.VERIFIED
    assert hashed == ["b.gguf"]


def test_stamp_compares_ctime_and_device(tmp_path):
    """A stamp matches only the same size, mtime, inode, ctime and device."""
    p = tmp_path / "f"
    p.write_bytes(W1)
    st = p.stat()
    stamp = Stamp.of(st, "0" * 64)
    assert stamp.same_file(st)
    for field in ("size", "mtime_ns", "inode", "ctime_ns", "dev"):
        other = attrs.evolve(stamp, **{field: getattr(stamp, field) + 1})
        assert not other.same_file(st), field


def test_mismatch_is_sticky_until_a_full_check_passes(tmp_path, stamps, hashed):
    """After a mismatch, repairing the file is not enough: only --full lifts the refusal."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    (tmp_path / "m" / "a.gguf").write_bytes(b"x" * len(W1))
    assert Verifier(stamps).verify(spec).state is ModelState.MISMATCH
    (tmp_path / "m" / "a.gguf").write_bytes(W1)  # repaired
    hashed.clear()
    again = Verifier(stamps).verify(spec)
    assert (again.state, again.detail) == (ModelState.MISMATCH, "model m: shard a.gguf hash mismatch")
    assert hashed == []  # sticky: refused without reading
    assert Verifier(stamps).verify(spec, full=True).state is ModelState.VERIFIED
    assert stamps.get_sticky("m") is None
    assert Verifier(stamps).verify(spec).state is ModelState.VERIFIED


def test_failed_full_check_keeps_the_mismatch(tmp_path, stamps):
    """--full on a still-broken model keeps it refused."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    (tmp_path / "m" / "a.gguf").write_bytes(b"x" * len(W1))
    Verifier(stamps).verify(spec)
    assert Verifier(stamps).verify(spec, full=True).state is ModelState.MISMATCH
    assert stamps.get_sticky("m") == "model m: shard a.gguf hash mismatch"


def test_missing_is_not_sticky(tmp_path, stamps):
    """A file that comes back is usable without --full: missing is not a mismatch."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    (tmp_path / "m" / "b.gguf").rename(tmp_path / "b.away")
    check = Verifier(stamps).verify(spec)
    assert (check.state, check.detail) == (ModelState.MISSING, "model m: shard b.gguf is missing")
    assert stamps.get_sticky("m") is None
    (tmp_path / "b.away").rename(tmp_path / "m" / "b.gguf")
    assert Verifier(stamps).verify(spec).state is ModelState.VERIFIED


def test_a_failed_check_makes_the_next_one_hash_everything(tmp_path, verifier, hashed):
    """After a model went missing in this process, its return is hashed in full."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1, "b.gguf": W2})
    verifier.verify(spec)
    (tmp_path / "m" / "b.gguf").rename(tmp_path / "b.away")
    assert verifier.verify(spec).state is ModelState.MISSING
    (tmp_path / "b.away").rename(tmp_path / "m" / "b.gguf")
    hashed.clear()
    assert verifier.verify(spec).state is ModelState.VERIFIED
    assert sorted(hashed) == ["a.gguf", "b.gguf"]


def test_an_edited_spec_counts_as_a_new_model(tmp_path, verifier, hashed):
    """A manifest edit (new digest) is checked by hashing, not by old stamps."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    verifier.verify(spec)
    hashed.clear()
    other = make_spec(tmp_path / "m", {"a.gguf": W2})
    assert verifier.verify(other).state is ModelState.VERIFIED
    assert hashed == ["a.gguf"]
    assert verifier.verify(spec).state is ModelState.MISMATCH


def test_verify_model_function_takes_first_in_process_explicitly(tmp_path, stamps, hashed):
    """The function form: first_in_process=False trusts stored stamps."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})
    verify_model(spec, stamps, full=False, first_in_process=True)
    hashed.clear()
    assert verify_model(spec, stamps, full=False, first_in_process=False).state is ModelState.VERIFIED
    assert hashed == []
    verify_model(spec, stamps, full=False, first_in_process=True)
    assert hashed == ["a.gguf"]


def test_unchanged_full_check_writes_no_stamps(tmp_path):
    """A re-hash that finds the same stamps does not write them again (cheap on SQLite)."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W1})

    class Counting(MemoryStampStore):
        puts = 0

        def put_stamps(self, model, stamps):
            Counting.puts += 1
            super().put_stamps(model, stamps)

    store = Counting()
    Verifier(store).verify(spec)
    Verifier(store).verify(spec, full=True)
    assert Counting.puts == 1


def test_ollama_models_verify_without_files():
    """An Ollama model has nothing on disk here: Ollama checks its own blobs."""
    spec = ModelSpec(name="o", format=ModelFormat.OLLAMA,
                     source=ModelSourceInfo(ollama_tag="llama3.2:3b"))
    check = Verifier(MemoryStampStore()).verify(spec)
    assert check.state is ModelState.VERIFIED
    assert modelstore.canonical_paths(spec) == ()
