"""§1.4 per version: a role's extra_args are judged by the flag table of its Program's build."""

from __future__ import annotations

from tests.programs.test_program_docs import load, messages, program, world

OLD = "serve: {port: 8080, extra_args: [--no-mmap, --mlock]}"


def _with_args(text: str, serve: str = OLD) -> str:
    return text.replace("serve: {port: 8080}", serve)


def test_a_b10068_program_takes_its_own_spellings() -> None:
    """§1.4: --no-mmap and --mlock are flags of b10068, so a role on a b10068 Program (by the
    node's serve_programs, or its own spec.program) validates with them."""
    old = program("llama-b10068", "b10068")
    assert load(_with_args(world("llama-b10068", programs=old))).problems == ()
    both = program() + "---\n" + old
    assert load(_with_args(world("llama-b11434", "llama-b10068", programs=both))).problems == ()


def test_the_same_role_on_b11434_is_refused_naming_the_build_and_the_rename() -> None:
    """§1.4: the same list on a b11434 Program is refused, each refusal naming the build and
    what it renamed the flag to; on an unpinned path it is judged by the testbed's b11434."""
    for text in (_with_args(world()), _with_args(world("/usr/local/bin/llama-server"))):
        got = messages(load(text))
        assert len(got) == 2, got
        assert "'--no-mmap' is not a flag of llama-server b11434 (renamed --load-mode after " \
               "b10068)" in got[0]


def test_a_role_is_judged_by_every_build_its_nodes_run() -> None:
    """§1.4: a role without spec.program may run on any NodeConfig's program: a flag one
    of those builds lacks is refused, once, naming that build."""
    both = program() + "---\n" + program("llama-b10068", "b10068")
    second = ("---\napiVersion: reconciler/v1\nkind: NodeConfig\nmetadata: {name: n2}\n"
              "spec:\n  allowed_ports: {from: 8000, to: 9000}\n"
              "  serve_programs: {llamacpp: llama-b10068}\n")
    new = _with_args(world(programs=both), "serve: {port: 8080, extra_args: [--load-mode, none]}")
    got = messages(load(new + second))
    assert len(got) == 2 and "'--load-mode' is not a flag of llama-server b10068" in got[0], got
    assert messages(load(new)) == []


def test_a_build_without_a_table_is_warned_with_the_one_that_judges_it() -> None:
    """§1.4: b10500 has no table: b10068's (the nearest older) judges its roles, and
    validate warns which."""
    result = load(_with_args(world("llama-b10500", programs=program("llama-b10500", "b10500"))))
    assert result.problems == ()
    assert [w.message for w in result.warnings] == [
        "no flag table for llama-server b10500: its roles' extra_args are judged by b10068's "
        "(the nearest older build with one)"]
