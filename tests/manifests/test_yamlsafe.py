"""YAML reading: lines for every path, and the refusals PyYAML would not make."""

from __future__ import annotations

import pytest

from reconciler.manifests import yamlsafe
from reconciler.manifests.yamlsafe import MAX_FILE_BYTES, parse


def test_every_path_has_its_line() -> None:
    """Keys map to their own line; list items to theirs; missing keys to their mapping."""
    text = b"# c\na: 1\nb:\n  c: [x,\n     y]\n  d:\n    - e: 1\n"
    (doc,), problems = parse("f.yaml", text)
    assert problems == []
    assert doc.line == 2
    assert doc.line_of(("a",)) == 2
    assert doc.line_of(("b", "c", 1)) == 5
    assert doc.line_of(("b", "d", 0, "e")) == 7
    assert doc.line_of(("b", "missing", "deeper")) == 3


def test_documents_and_empty_documents() -> None:
    """Several documents per file; stray '---' and comment-only documents are skipped."""
    docs, problems = parse("f.yaml", b"---\n# only a comment\n---\na: 1\n---\n---\nb: 2\n---\n")
    assert problems == []
    assert [d.value for d in docs] == [{"a": 1}, {"b": 2}]
    assert [d.line for d in docs] == [4, 7]


def test_duplicate_keys_are_refused() -> None:
    """A duplicate key is a problem at the second occurrence, naming the first."""
    _, problems = parse("f.yaml", b"a:\n  b: 1\n  b: 2\n")
    assert [str(p) for p in problems] == ["f.yaml:3: $.a.b: duplicate key 'b' (first at line 2)"]


def test_alias_bomb_is_refused_quickly() -> None:
    """A billion-laughs document is refused after MAX_NODES nodes, not expanded."""
    lines = [b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [b"a%d: &a%d [%s]" % (i, i, b", ".join([b"*a%d" % (i - 1)] * 10)) for i in range(1, 9)]
    docs, problems = parse("f.yaml", b"\n".join(lines))
    assert docs == []
    assert len(problems) == 1 and "more than 10000" in problems[0].message


def test_small_aliases_are_fine() -> None:
    """Anchors and aliases within the limit are plain YAML and allowed."""
    (doc,), problems = parse("f.yaml", b"a: &x [1, 2]\nb: *x\n")
    assert problems == [] and doc.value == {"a": [1, 2], "b": [1, 2]}


def test_recursive_alias_is_refused() -> None:
    """A self-referencing alias is refused, not followed forever."""
    docs, problems = parse("f.yaml", b"a: &x [1, *x]\n")
    assert docs == [] and len(problems) == 1


def test_deep_nesting_is_a_problem_not_a_crash() -> None:
    """Deeply nested flow collections give a problem, not a RecursionError."""
    for text in (b"[" * 5000, b"a: " + b"[" * 100 + b"]" * 100, b"{a: " * 3000):
        docs, problems = parse("f.yaml", text)
        assert docs == [] and len(problems) == 1, text[:10]


def test_size_and_encoding() -> None:
    """Over 1 MiB and non-UTF-8 are refused with the line of the bad byte; a BOM is fine."""
    _, problems = parse("f.yaml", b"#" * (MAX_FILE_BYTES + 1))
    assert problems[0].line == 0 and "larger than 1 MiB" in problems[0].message
    _, problems = parse("f.yaml", b"a: 1\nb: \xff\n")
    assert (problems[0].line, problems[0].message[:15]) == (2, "not valid UTF-8")
    (doc,), problems = parse("f.yaml", "\ufeffa: 1\n".encode())
    assert problems == [] and doc.value == {"a": 1}


def test_scalars_stay_plain() -> None:
    """Dates stay text; unusual tags and non-string keys are problems."""
    (doc,), problems = parse("f.yaml", b"d: 2024-01-01\n")
    assert doc.value == {"d": "2024-01-01"} and problems == []
    _, problems = parse("f.yaml", b"a: !!python/object:os.system x\n1: b\n")
    assert len(problems) == 2


def test_huge_integer_is_a_problem() -> None:
    """An integer too long for Python's int() is a problem, not a ValueError."""
    docs, problems = parse("f.yaml", b"a: " + b"9" * 5000 + b"\n")
    assert docs[0].value == {"a": None}
    assert "as a number" in problems[0].message


def test_limits_are_what_the_issue_says() -> None:
    """1 MiB per file, 10,000 nodes per document."""
    assert (yamlsafe.MAX_FILE_BYTES, yamlsafe.MAX_NODES) == (1 << 20, 10_000)


@pytest.mark.parametrize("values", [yamlsafe.MAX_NODES - 1, yamlsafe.MAX_NODES])
@pytest.mark.parametrize("aliased", [False, True], ids=["written", "aliased"])
def test_node_limit_counts_every_text_value(values: int, aliased: bool) -> None:
    """The root mapping and each of its values count (keys do not): MAX_NODES nodes pass,
    one more is refused — text values as well as any other (the builder's short cut)."""
    if aliased:  # the values behind one alias each: the same count, expanded
        text = "a: &t x\n" + "".join(f"k{i}: *t\n" for i in range(values - 1))
    else:
        text = "".join(f"k{i}: x\n" for i in range(values))
    docs, problems = yamlsafe.parse("f.yaml", text.encode())
    if values < yamlsafe.MAX_NODES:
        assert not problems and len(docs[0].value) == values
        assert docs[0].lines[(list(docs[0].value)[-1],)] == values  # the last line
    else:
        assert [p.message for p in problems] == [
            f"document expands to more than {yamlsafe.MAX_NODES} YAML nodes (aliases of aliases?); "
            "refused"]


@pytest.mark.parametrize("depth", [yamlsafe.MAX_DEPTH - 1, yamlsafe.MAX_DEPTH])
def test_depth_limit_on_a_text_value(depth: int) -> None:
    """A text value as deep as the limit allows passes; one level deeper is refused."""
    text = "".join(f"{' ' * i}k:\n" for i in range(depth - 1)) + " " * (depth - 1) + "k: x\n"
    docs, problems = yamlsafe.parse("f.yaml", text.encode())
    assert bool(problems) == (depth == yamlsafe.MAX_DEPTH), problems
