"""names_match: when a server's listed model name means the wanted one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.runtimes.common import names_match

TOKEN = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,20}", fullmatch=True)


@pytest.mark.parametrize(
    ("wanted", "listed", "expected"),
    [
        ("tiny", "tiny", True),
        ("Tiny", "tINY", True),
        ("llama3.2", "llama3.2:latest", True),
        ("llama3.2:latest", "llama3.2", True),
        ("llama3.2:3b", "llama3.2:latest", False),
        ("llama3", "llama3.2:latest", False),  # containment is for paths only
        ("tiny", "/opt/models/tiny.gguf", True),
        ("qwen2.5-7b", "/m/Qwen2.5-7B-Instruct-Q4_K_M.gguf", True),
        ("qwen", "/m/qwen-dir/llama.gguf", False),  # only the last segment counts
        ("coder", "tiny", False),
        ("", "tiny", False),
        ("tiny", "", False),
    ],
)
def test_names_match_table(wanted: str, listed: str, expected: bool) -> None:
    """Exact, :latest-equivalent, or path stem containing the name; case-insensitive."""
    assert names_match(wanted, listed) is expected


@given(TOKEN)
def test_a_name_matches_itself_its_latest_and_its_gguf_path(name: str) -> None:
    """Every name matches itself, name:latest, and /any/dir/<name>.gguf, in any case."""
    assert names_match(name, name.upper())
    assert names_match(name, f"{name}:latest")
    assert names_match(f"{name}:latest", name)
    assert names_match(name, f"/any/dir/{name}.gguf")


NOT_PATH = TOKEN.filter(lambda t: not t.lower().endswith(".gguf"))


@given(NOT_PATH, NOT_PATH)
def test_latest_equivalence_is_symmetric(a: str, b: str) -> None:
    """Without paths (or .gguf names) involved, the rule is symmetric."""
    assert names_match(a, b) == names_match(b, a)
