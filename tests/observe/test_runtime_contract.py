"""The runtime contract: every rule, checked on every entry of the registry (runtimes.SPECS).

A new runtime module is held to all of these the moment it is in the table.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.manifests import extra_args
from reconciler.planner import identity
from reconciler import runtimes
from reconciler.core.decisions import PlanContext
from reconciler.core.desired import (
    Desired,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSourceInfo,
    ModelSpec,
    NodeConfig,
    RoleSpec,
    Runtime,
    ServeSpec,
)
from reconciler.core.observed import Health, Observed, ProbeFacts, Remembered, RoleObservation
from reconciler.planner.plan import plan
from reconciler.runtimes.common import ProbeAnswer, ProbeContext, ProbeRequest
from reconciler.runtimes.flags import REFUSED as REFUSED_CLASSES, Flag, ValueType
from reconciler.runtimes.spec import RuntimeSpec
from tests.observe.scripted import REFUSED, drive

SPECS = list(runtimes.SPECS.values())
ids = [str(s.runtime) for s in SPECS]
every = pytest.mark.parametrize("rt", SPECS, ids=ids)
launched = pytest.mark.parametrize("rt", [s for s in SPECS if s.launched],
                                   ids=[str(s.runtime) for s in SPECS if s.launched])
SERVE_OPTIONS = {"ctx", "kv_quant", "cache_type_k", "cache_type_v", "draft_model", "mmproj",
                 "loras", "adapter", "api_key_file", "slot_save"}
HOST, PORT = "127.0.0.1", 8123
NODE = NodeConfig(serve_programs=tuple((s.runtime, f"/opt/{s.runtime}") for s in SPECS
                                       if s.launched))


def model_for(rt: RuntimeSpec) -> ModelSpec:
    """A Model of a format the runtime loads (first in sorted order)."""
    fmt = sorted(rt.formats)[0]
    if fmt is ModelFormat.OLLAMA:
        return ModelSpec(name="m", format=fmt, source=ModelSourceInfo(ollama_tag="m:1b"))
    return ModelSpec(name="m", format=fmt, root="/srv/models/m",
                     shards=(ModelFile(path="w.bin", sha256="a" * 64, size=1),))


def role_for(rt: RuntimeSpec, **serve: object) -> RoleSpec:
    return RoleSpec(name="r", runtime=rt.runtime, mode=Mode.MANAGED if rt.managed else Mode.ADOPTED,
                    model="m", serve=ServeSpec(host=HOST, port=PORT, **serve),  # type: ignore[arg-type]
                    keep_alive=60.0 if rt.loads_models else None)


def example(flag: Flag) -> str:
    """A well-formed value of ``flag``."""
    if flag.choices:
        return flag.choices[0]
    return {ValueType.JSON: "{}", ValueType.FILE: "f.txt"}.get(flag.value, "1")


def flag_uses(rt: RuntimeSpec) -> list[list[str]]:
    """Each allowed flag (every spelling) with well-formed values."""
    return [[spelling] + [example(flag)] * flag.arity
            for spelling, flag in rt.flags.items() if flag.cls not in REFUSED_CLASSES]


def owned(rt: RuntimeSpec) -> set[str]:
    return {s for s, f in rt.flags.items() if f.cls in REFUSED_CLASSES}


def every_allowed_flag(rt: RuntimeSpec) -> list[str]:
    return [entry for use in flag_uses(rt) for entry in use]


def test_the_table_covers_every_runtime_once() -> None:
    """Every Runtime member has exactly one declaration, filed under its own name."""
    assert set(runtimes.SPECS) == set(Runtime)
    assert all(key is spec.runtime for key, spec in runtimes.SPECS.items())
    assert len({id(s) for s in SPECS}) == len(SPECS)


@every
def test_declaration_is_coherent(rt: RuntimeSpec) -> None:
    """Formats, title and identity exist; capabilities that imply each other do."""
    assert rt.formats and rt.title and rt.identity
    assert rt.serve_options <= SERVE_OPTIONS
    # managed means something to manage: a process we launch, or models we load
    assert rt.managed == (rt.launched or rt.loads_models)
    # a process we launch serves one role; only a server we do not launch is shared
    assert not (rt.launched and (rt.shared_endpoint or rt.loads_models))
    assert (rt.load_request is not None) == rt.loads_models == (rt.unload_request is not None)
    assert (rt.read_load is not None) == rt.loads_models
    if rt.loads_models:  # §2 a load or an unload is a POST, never a pull, a delete or a push
        for request in (rt.load_request("m", 60.0), rt.unload_request("m")):
            assert request.method == "POST" and not any(
                word in request.path for word in ("pull", "delete", "push", "copy", "create"))
    assert rt.default_port is None or 1 <= rt.default_port <= 65535
    assert "draft_model" not in rt.serve_options or rt.launched


@every
def test_extra_args_table_never_holds_an_owned_flag(rt: RuntimeSpec) -> None:
    """No runtime allows a flag the reconciler sets itself; one never launched allows none."""
    if not rt.launched:
        assert rt.flags == {} and rt.argv is None
        assert extra_args.check(rt.runtime, ["--x"])  # any entry is a problem
    for use in flag_uses(rt):
        assert extra_args.check(rt.runtime, use) == [], use


@launched
def test_argv_carries_host_port_model_once(rt: RuntimeSpec) -> None:
    """The argv holds our host, port and model; extra_args never add an owned flag."""
    assert rt.argv is not None
    model = model_for(rt)
    argv = rt.argv(role_for(rt, extra_args=tuple(every_allowed_flag(rt))), model, None)
    assert argv[argv.index("--host") + 1] == HOST
    assert argv[argv.index("--port") + 1] == str(PORT)
    assert any(a.startswith(str(model.root)) for a in argv)
    for flag in owned(rt):
        assert argv.count(flag) <= 1, flag


@every
def test_launch_only_for_launched_runtimes(rt: RuntimeSpec) -> None:
    """identity.launch and the planner give a Launch only to a runtime we launch."""
    role, model = role_for(rt), model_for(rt)
    launch = identity.launch(role, {"m": model}, NODE, {}, "/data")
    assert (launch is not None) == rt.launched
    desired = Desired(roles=(role,), models=(model,), node=NODE)
    facts = [None, *(ProbeFacts(health=h, listed_models=("m", "m:1b")) for h in Health)]
    for probe in facts:
        observed = Observed(roles=(RoleObservation(name="r", probe=probe),))
        decisions = plan(desired, observed, Remembered(), PlanContext(), 100.0).decisions
        assert all((d.launch is not None) <= rt.launched for d in decisions)


STATUSES = (200, 404, 503)


def _scripted(statuses: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """Answer the n-th request with the n-th status (the last one repeats)."""
    seen: list[ProbeRequest] = []

    class Script(dict):
        def get(self, path, default=None):  # type: ignore[no-untyped-def]
            status = statuses[min(len(seen), len(statuses) - 1)]
            seen.append(path)
            return ProbeAnswer(status=status, body={"data": [], "models": []}, latency=0.001)

    return Script()


def _contexts(adopted: bool) -> list[ProbeContext]:
    return [ProbeContext(wanted=w, adopted=adopted, starting=s, readiness=r,
                         launch_argv=("/p", "--model", "/m"))
            for w, s, r in itertools.product((None, "m"), (False, True), (False, True))]


@every
def test_adopted_exchange_sends_only_gets(rt: RuntimeSpec) -> None:
    """Whatever the answers and the context, an adopted role's exchange sends only GETs."""
    for ctx in _contexts(adopted=True):
        for statuses in itertools.product(STATUSES, repeat=3):
            _, sent = drive(rt.exchange(ctx), _scripted(statuses))
            assert sent and all(r.method == "GET" for r in sent), (ctx, statuses, sent)


@every
def test_first_batch_is_the_same_gets_whatever_the_context(rt: RuntimeSpec) -> None:
    """The first batch never depends on the context and holds only GETs: the observer
    sends it while it still reads the process table (ownership, settled, readiness)."""
    firsts = {next(rt.exchange(ctx)) for ctx in _contexts(adopted=False) + _contexts(adopted=True)}
    assert len(firsts) == 1
    assert all(r.method == "GET" for r in firsts.pop())


@every
def test_readiness_request_only_when_asked(rt: RuntimeSpec) -> None:
    """The readiness request goes out only with ctx.readiness (after our own start)."""
    for ctx in _contexts(adopted=False):
        _, sent = drive(rt.exchange(ctx), _scripted((200,)))
        asked = rt.readiness is not None and rt.readiness in sent
        assert asked == (rt.readiness is not None and ctx.readiness), (ctx, sent)
        assert all(r.method == "GET" for r in sent if r != rt.readiness)


@every
def test_read_turns_any_answers_into_facts(rt: RuntimeSpec) -> None:
    """Refused everywhere → unreachable facts (never an exception, never 'up')."""
    for ctx in _contexts(adopted=False) + _contexts(adopted=True):
        answers, _ = drive(rt.exchange(ctx), {})
        facts = rt.read(answers, ctx)
        assert facts.health is Health.UNREACHABLE and facts.detail
        assert answers and all(a == REFUSED for a in answers.values())


TOKEN = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,30}", fullmatch=True)


@every
@given(name=TOKEN)
def test_names_match_is_reflexive(rt: RuntimeSpec, name: str) -> None:
    """Every model name means itself; None means nothing."""
    assert rt.names_match(name, name) and rt.same(name, name)
    assert rt.lists((name,), name)
    assert not rt.same(None, name) and not rt.same(name, None)


@every
def test_deep_request_exists(rt: RuntimeSpec) -> None:
    """Every runtime has a deep health request for a role with a model: a one-token POST."""
    request = rt.deep_request(role_for(rt), model_for(rt), NODE, ())
    assert isinstance(request, ProbeRequest), request
    assert request.method == "POST" and isinstance(request.body, dict)


@every
def test_wanted_name_comes_from_the_role_or_its_model(rt: RuntimeSpec) -> None:
    """The wanted name, when a runtime has one, is the role's or its model's name or tag."""
    wanted = rt.wanted(role_for(rt), model_for(rt))
    assert wanted in (None, "r", "m", model_for(rt).ollama_tag)


def test_readme_runtime_table_has_every_runtime() -> None:
    """README's runtime table has one row per registered runtime, and no other."""
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Runtimes", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    rows = [line.split("|")[1].strip().strip("`") for line in table[2:]]
    assert rows == [str(rt.runtime) for rt in SPECS]
