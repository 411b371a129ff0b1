"""Helpers for the model tests: real files in tmp_path, specs that describe them."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from reconciler.models import modelstore
from reconciler.core.desired import ModelFile, ModelFormat, ModelSpec
from reconciler.models.modelstore import MemoryStampStore, Verifier


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_spec(root: Path, files: dict[str, bytes], *, name: str = "m",
              tokenizer: tuple[str, bytes] | None = None,
              fmt: ModelFormat = ModelFormat.GGUF) -> ModelSpec:
    """Write ``files`` (and the tokenizer) under ``root``; a spec that declares them."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    tok = None
    if tokenizer is not None:
        (root / tokenizer[0]).write_bytes(tokenizer[1])
        tok = ModelFile(path=tokenizer[0], sha256=digest(tokenizer[1]))
    shards = tuple(ModelFile(path=p, size=len(d), sha256=digest(d)) for p, d in sorted(files.items()))
    return ModelSpec(name=name, format=fmt, root=str(root), shards=shards, tokenizer=tok)


@pytest.fixture
def stamps() -> MemoryStampStore:
    return MemoryStampStore()


@pytest.fixture
def verifier(stamps: MemoryStampStore) -> Verifier:
    return Verifier(stamps)


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """Every path hash_file is asked to read, in order."""
    calls: list[str] = []
    real = modelstore.hash_file

    def counting(path: str, **kw):
        calls.append(os.path.basename(path))
        return real(path, **kw)

    monkeypatch.setattr(modelstore, "hash_file", counting)
    return calls
