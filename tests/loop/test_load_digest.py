"""The load room's validated-set digest follows the schema files' bytes (reconciler.sources)."""

from __future__ import annotations

import shutil
from pathlib import Path

from reconciler.manifests import schemata
from reconciler.repo import sources

FILES = [("m/a.yaml", b"apiVersion: reconciler/v1\n")]


def test_a_changed_schema_file_changes_the_digest(tmp_path, monkeypatch):
    """The same manifests under an edited schema are not 'already validated'."""
    package = Path(schemata.__file__).parent
    copy = tmp_path / "reconciler"
    shutil.copytree(package / "schemas", copy / "schemas")
    monkeypatch.setattr(schemata, "__file__", str(copy / "schemata.py"))
    before = sources._set_digest(FILES)
    assert sources._set_digest(FILES) == before
    schema = copy / "schemas" / "model.schema.json"
    schema.write_bytes(schema.read_bytes().replace(b'"', b' "', 1))
    assert sources._set_digest(FILES) != before


def test_without_schema_files_the_digest_reads_package_data(tmp_path, monkeypatch):
    """No plain schema directory (a zipped install): the parsed schemas are digested instead."""
    monkeypatch.setattr(schemata, "__file__", str(tmp_path / "nowhere" / "schemata.py"))
    assert len(sources._set_digest(FILES)) == 64
    assert sources._schema_bytes().startswith(b"[{")
