"""Golden invalid manifests: one small YAML file per case, its exact messages beside it.

Each ``invalid/<case>.yaml`` is loaded alone (under its base name) and must
give exactly the lines of ``invalid/<case>.expected`` (``LINE: $.path: message``).
To add a case, write both files; review the messages as an operator would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.manifests import loader

CASES = Path(__file__).parent / "invalid"


def _cases() -> list[str]:
    return sorted(p.stem for p in CASES.glob("*.yaml"))


def test_every_case_has_expectations() -> None:
    """Every case file has its .expected file and vice versa."""
    yaml = {p.stem for p in CASES.glob("*.yaml")}
    expected = {p.stem for p in CASES.glob("*.expected")}
    assert yaml == expected
    assert len(yaml) >= 30


@pytest.mark.parametrize("case", _cases())
def test_golden_case(case: str) -> None:
    """The case gives exactly its expected problems, sorted, and no desired state."""
    name = f"{case}.yaml"
    result = loader.load([(name, (CASES / name).read_bytes())])
    want = (CASES / f"{case}.expected").read_text(encoding="utf-8").splitlines()
    got = [f"{p.line}: {p.path}: {p.message}" for p in result.problems]
    assert got == want
    assert result.desired is None
    assert all(p.file == name for p in result.problems)


def test_cases_together_report_every_file() -> None:
    """Loaded as one set, the cases still report a problem in every file and no desired state."""
    files = [(p.name, p.read_bytes()) for p in sorted(CASES.glob("*.yaml"))]
    result = loader.load(files)
    assert result.desired is None
    assert {p.file for p in result.problems} == {name for name, _ in files}
    assert list(result.problems) == sorted(result.problems)
