"""The validated-manifests digest: unchanged bytes skip the schema stage, nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from reconciler.repo import sources

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "manifests"
    shutil.copytree(EXAMPLES, target)
    return target


def test_second_load_of_the_same_bytes_skips_the_schema_stage(tmp_path, monkeypatch):
    """A set that loaded cleanly once is not schema-checked again, and loads the same."""
    manifests, cache = _copy(tmp_path), tmp_path / "state"
    first = sources.load_desired([str(manifests)], cache_dir=str(cache))
    assert first.ok and (cache / "validated-manifests").exists()

    from reconciler.manifests import schemacheck

    def refuse(*args, **kwargs):
        raise AssertionError("the schema stage ran for bytes already validated")

    monkeypatch.setattr(schemacheck, "check", refuse)
    second = sources.load_desired([str(manifests)], cache_dir=str(cache))
    assert second.ok and second.desired == first.desired


def test_a_changed_byte_is_schema_checked_again(tmp_path):
    """Editing a file invalidates the digest: a schema problem is still found."""
    manifests, cache = _copy(tmp_path), tmp_path / "state"
    assert sources.load_desired([str(manifests)], cache_dir=str(cache)).ok
    target = next(p for p in sorted(manifests.iterdir()) if "kind: InferenceSpec" in p.read_text())
    target.write_text(target.read_text().replace("mode: managed", "mode: managed\n  bogus: 1", 1))
    result = sources.load_desired([str(manifests)], cache_dir=str(cache))
    assert not result.ok
    assert any("bogus" in str(p) for p in result.problems), result.problems


def test_an_invalid_set_is_never_remembered(tmp_path):
    """Only a set without problems writes the digest."""
    manifests, cache = _copy(tmp_path), tmp_path / "state"
    (manifests / "broken.yaml").write_text("apiVersion: reconciler/v1\nkind: Model\n")
    assert not sources.load_desired([str(manifests)], cache_dir=str(cache)).ok
    assert not (cache / "validated-manifests").exists()
