"""§1.4 per version: a role's extra_args are judged by the flag table of its Program's build."""

from __future__ import annotations

from reconciler.core.desired import Runtime
from reconciler.planner import identity
from reconciler.runtimes import flags_for
from reconciler.runtimes.flags import FlagClass
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


def test_a_flag_only_an_older_build_has_is_launched_split_by_that_builds_table() -> None:
    """§1.4/§14 ``--ctx-size-draft=2048`` is a flag of b5361 (gone from b11434): a role on a
    b5361 Program validates with it and is launched with the flag and its value as two
    arguments, as llama-server's parser wants them (cut by b11434's table it stayed one)."""
    text = _with_args(world("llama-b5361", programs=program("llama-b5361", "b5361")),
                      "serve: {port: 8080, extra_args: [--ctx-size-draft=2048]}")
    result = load(text)
    assert result.problems == ()
    desired = result.desired
    launcher = identity.Launcher(desired.node, {}, "/d", desired.programs)
    argv = launcher.argv(desired.roles[0], {m.name: m for m in desired.models})
    assert argv[-2:] == ("--ctx-size-draft", "2048"), argv


def test_every_older_builds_file_flag_is_a_file_flag_of_todays_table() -> None:
    """§1.4 the repository files a role's ``extra_args`` name are found with today's table
    (``extra_args.file_values``: a role may run on several builds): that holds only while
    every build's FILE flags are today's too. A table that adds one must teach
    ``file_values`` the role's builds."""
    today = flags_for(Runtime.LLAMACPP, None)
    for version in ("b5361", "b10068"):
        table = flags_for(Runtime.LLAMACPP, version)
        files = [s for s in table if table.find(s).cls is FlagClass.FILE]
        assert files, version
        assert all(today.find(s) is not None and today.find(s).cls is FlagClass.FILE
                   for s in files), version
