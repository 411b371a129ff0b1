"""§1.1 `models add` at the edges of its names: split parts past their total, Ollama tags.

A file named like ``x-00004-of-00003.gguf`` (a part past the total) is no part
of any split set: it is one GGUF file, the model by itself, not an incomplete
set whose parts 1–3 are "missing". An Ollama tag is held to the rule of the
name's parts: no ``..`` anywhere in it (it is a path component in Ollama's store).
"""

from __future__ import annotations

import pytest

from reconciler.manifests import modeldoc


def test_a_part_past_its_total_is_one_file_not_a_split_set() -> None:
    """§1.1 a part number above the total is not a split name: the file is one model."""
    assert modeldoc.split_gguf_parts("x-00004-of-00003.gguf") is None
    assert modeldoc.split_gguf_parts("x-00000-of-00000.gguf") is None
    assert modeldoc.one_gguf_model(["x-00004-of-00003.gguf"], where="d") == (
        "x-00004-of-00003.gguf",)


@pytest.mark.parametrize("text", ["llama3:a..b", "llama3:q4..", "me/a..b:latest"])
def test_a_tag_or_part_with_two_dots_is_refused(text: str) -> None:
    """§1.1 `--ollama NAME:TAG`: ``..`` inside the tag is refused, as inside a name part."""
    with pytest.raises(ValueError):
        modeldoc.parse_ollama_name(text)
