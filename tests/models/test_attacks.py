"""Bad input and attacks on a model's files: each is refused with its own message."""

from __future__ import annotations

import os
import threading

import attrs
import pytest

from reconciler.models import modelstore
from reconciler.core.desired import ModelFile
from reconciler.core.observed import ModelState
from reconciler.models.modelstore import ModelPathError, NotRegularFile, canonical_paths, hash_file

from .conftest import digest, make_spec

W = b"w" * 4096


def check_of(verifier, spec):
    check = verifier.verify(spec)
    return check.state, check.detail


def test_shard_replaced_by_symlink_to_etc_passwd(tmp_path, verifier):
    """A shard that resolves outside the root is refused before anything is read."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    os.symlink("/etc/passwd", tmp_path / "m" / "a.gguf")
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, "model m: shard a.gguf resolves outside the model root")


def test_dangling_symlink_outside_is_outside_not_missing(tmp_path, verifier):
    """A link to a missing file outside the root is an escape, not a missing file."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    os.symlink(tmp_path / "elsewhere" / "a.gguf", tmp_path / "m" / "a.gguf")
    assert check_of(verifier, spec)[1] == "model m: shard a.gguf resolves outside the model root"


def test_symlinked_directory_pointing_outside(tmp_path, verifier):
    """A subdirectory that is a symlink to a directory outside the root is refused."""
    spec = make_spec(tmp_path / "m", {"sub/a.safetensors": W})
    outside = tmp_path / "outside"
    (tmp_path / "m" / "sub").rename(outside)
    os.symlink(outside, tmp_path / "m" / "sub")
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, "model m: shard sub/a.safetensors resolves outside the model root")


def test_symlink_inside_the_root_is_fine(tmp_path, verifier):
    """A link that stays inside the root is followed."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    (tmp_path / "m" / "a.gguf").rename(tmp_path / "m" / "real.bin")
    os.symlink("real.bin", tmp_path / "m" / "a.gguf")
    assert verifier.verify(spec).state is ModelState.VERIFIED


def test_symlink_loop(tmp_path, verifier):
    """Two links pointing at each other: refused, no hang, no exception."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    os.symlink("b.gguf", tmp_path / "m" / "a.gguf")
    os.symlink("a.gguf", tmp_path / "m" / "b.gguf")
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, "model m: shard a.gguf is a symlink loop")


@pytest.mark.parametrize("bad", ["../a.gguf", "sub/../../a.gguf", "/etc/passwd", "./a.gguf", "a//b", ""])
def test_path_with_dot_dot_or_absolute(tmp_path, verifier, bad):
    """A declared path that is not a safe relative path never reaches the filesystem."""
    (tmp_path / "a.gguf").write_bytes(W)
    spec = make_spec(tmp_path / "m", {"x.gguf": W})
    spec = attrs.evolve(spec, shards=(ModelFile(path=bad, size=len(W), sha256=digest(W)),))
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, f"model m: shard {bad} resolves outside the model root")


def test_missing_tokenizer(tmp_path, verifier):
    """A declared tokenizer that is gone makes the model missing, named as a tokenizer."""
    spec = make_spec(tmp_path / "m", {"a.safetensors": W}, tokenizer=("tokenizer.json", b"{}"))
    os.unlink(tmp_path / "m" / "tokenizer.json")
    assert check_of(verifier, spec) == (
        ModelState.MISSING, "model m: tokenizer tokenizer.json is missing")


def test_tampered_tokenizer(tmp_path, verifier):
    """A tokenizer with other bytes is a mismatch like a shard."""
    spec = make_spec(tmp_path / "m", {"a.safetensors": W}, tokenizer=("tokenizer.json", b"{}"))
    (tmp_path / "m" / "tokenizer.json").write_bytes(b"[]")
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, "model m: tokenizer tokenizer.json hash mismatch")


def test_model_root_that_is_a_file(tmp_path, verifier, stamps):
    """A root that exists but is a file is refused (a mismatch), not detached."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    (tmp_path / "m" / "a.gguf").unlink()
    (tmp_path / "m").rmdir()
    (tmp_path / "m").write_bytes(b"not a dir")
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, f"model m: root {tmp_path / 'm'} is not a directory")
    assert stamps.get_sticky("m") is not None


def test_detached_root_is_not_a_mismatch(tmp_path, verifier, stamps):
    """A root that is not there (unmounted drive) is DETACHED and leaves no sticky mark."""
    spec = make_spec(tmp_path / "drive" / "models" / "m", {"a.gguf": W})
    (tmp_path / "drive" / "models" / "m" / "a.gguf").unlink()
    (tmp_path / "drive" / "models" / "m").rmdir()
    (tmp_path / "drive" / "models").rmdir()
    state, detail = check_of(verifier, spec)
    assert state is ModelState.DETACHED
    assert detail.startswith("model store is detached")
    assert stamps.get_sticky("m") is None


def test_empty_mount_point_root_is_detached(tmp_path, verifier):
    """A root that is an empty directory (the mount point of an unmounted drive) is detached."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    (tmp_path / "m" / "a.gguf").unlink()
    assert verifier.verify(spec).state is ModelState.DETACHED


def test_fifo_where_a_shard_should_be_does_not_block(tmp_path, verifier):
    """A FIFO is refused as not a regular file, without opening it (no writer, no hang)."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    os.mkfifo(tmp_path / "m" / "a.gguf")
    result: list = []
    t = threading.Thread(target=lambda: result.append(check_of(verifier, spec)), daemon=True)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive(), "verification blocked on a FIFO"
    assert result == [(ModelState.MISMATCH, "model m: shard a.gguf is not a regular file")]


def test_hash_file_on_a_fifo_raises_instead_of_blocking(tmp_path):
    """The second guard: opening a FIFO (O_NONBLOCK) and finding it is not a regular file."""
    os.mkfifo(tmp_path / "p")
    result: list = []

    def run():
        try:
            hash_file(str(tmp_path / "p"))
        except NotRegularFile as e:
            result.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive(), "hash_file blocked on a FIFO"
    assert len(result) == 1


def test_fifo_swapped_in_after_stat_is_caught_when_opened(tmp_path, verifier, monkeypatch):
    """If a FIFO replaces the file between stat and open, the fstat check refuses it."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    real_hash = modelstore.hash_file

    def swap_then_hash(path, **kw):
        os.unlink(path)
        os.mkfifo(path)
        return real_hash(path, **kw)

    monkeypatch.setattr(modelstore, "hash_file", swap_then_hash)
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, "model m: shard a.gguf is not a regular file")


def test_directory_where_a_shard_should_be(tmp_path, verifier):
    """A directory with the shard's name is not a regular file."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    os.mkdir(tmp_path / "m" / "a.gguf")
    assert check_of(verifier, spec)[1] == "model m: shard a.gguf is not a regular file"


def test_size_mismatch_is_a_mismatch_not_missing(tmp_path, verifier, stamps):
    """A truncated shard is reported with both sizes, as a (sticky) mismatch."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    (tmp_path / "m" / "a.gguf").write_bytes(W[:123])
    assert check_of(verifier, spec) == (
        ModelState.MISMATCH, f"model m: shard a.gguf size 123 != declared {len(W)}")
    assert stamps.get_sticky("m") is not None


def test_mismatch_wins_over_missing_in_the_detail(tmp_path, verifier):
    """With one file missing and another wrong, the refusal names the mismatch."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W, "b.gguf": W})
    os.unlink(tmp_path / "m" / "a.gguf")
    (tmp_path / "m" / "b.gguf").write_bytes(b"short")
    assert check_of(verifier, spec)[0] is ModelState.MISMATCH


def test_hf_snapshot_may_link_into_its_own_blobs(tmp_path, verifier):
    """An HF cache snapshot's links into ../../blobs count as inside the root."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / digest(W)).write_bytes(W)
    snap = repo / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    os.symlink(f"../../blobs/{digest(W)}", snap / "model.safetensors")
    spec = make_spec(snap, {})
    spec = attrs.evolve(spec, shards=(ModelFile(path="model.safetensors", size=len(W), sha256=digest(W)),))
    assert verifier.verify(spec).state is ModelState.VERIFIED
    assert canonical_paths(spec) == (f"{snap}/model.safetensors",)


def test_hf_snapshot_may_not_link_into_another_repo(tmp_path, verifier):
    """The blobs exception is the snapshot's own repository only."""
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / "x").write_bytes(W)
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "main"
    snap.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--tiny" / "blobs").mkdir()
    os.symlink(other / "x", snap / "model.safetensors")
    spec = attrs.evolve(make_spec(snap, {}),
                        shards=(ModelFile(path="model.safetensors", size=len(W), sha256=digest(W)),))
    assert verifier.verify(spec).detail.endswith("resolves outside the model root")


def test_canonical_paths_are_absolute_and_rechecked(tmp_path):
    """canonical_paths gives <canonical root>/<path> and refuses an escape made after verification."""
    real = tmp_path / "real"
    spec = make_spec(real / "m", {"a.gguf": W, "b.gguf": W}, tokenizer=("tokenizer.json", b"{}"))
    os.symlink(real, tmp_path / "link")
    spec = attrs.evolve(spec, root=str(tmp_path / "link" / "m"))
    assert canonical_paths(spec) == tuple(
        f"{real}/m/{p}" for p in ("a.gguf", "b.gguf", "tokenizer.json"))
    os.unlink(real / "m" / "b.gguf")
    os.symlink("/etc/passwd", real / "m" / "b.gguf")
    with pytest.raises(ModelPathError, match="shard b.gguf resolves outside the model root"):
        canonical_paths(spec)


def test_canonical_paths_refuses_a_detached_root(tmp_path):
    """No paths are handed to a server when the root has gone."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    spec = attrs.evolve(spec, root=str(tmp_path / "gone"))
    with pytest.raises(ModelPathError, match="model store is detached"):
        canonical_paths(spec)


def test_relative_root_is_refused(tmp_path, verifier):
    """A root that is not absolute is never resolved against the working directory."""
    spec = attrs.evolve(make_spec(tmp_path / "m", {"a.gguf": W}), root="m")
    assert verifier.verify(spec).state is ModelState.MISMATCH


def test_root_that_is_a_symlink_loop(tmp_path, verifier):
    """A root that loops is refused as a mismatch, not mistaken for a detached drive."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    spec = attrs.evolve(spec, root=str(tmp_path / "loop1"))
    assert verifier.verify(spec).state is ModelState.MISMATCH


def test_root_below_a_file_is_detached(tmp_path, verifier):
    """A root whose parent is a file does not exist: detached, like a missing one."""
    spec = make_spec(tmp_path / "m", {"a.gguf": W})
    (tmp_path / "f").write_bytes(b"")
    spec = attrs.evolve(spec, root=str(tmp_path / "f" / "m"))
    assert verifier.verify(spec).state is ModelState.DETACHED
