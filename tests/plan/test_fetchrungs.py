"""The fetch rung (BEHAVIOUR §1.6): a start waits for its Model's fetch, or is refused."""

from __future__ import annotations

from reconciler.core.decisions import Decision, Reason, Status, Verb, flat
from reconciler.core.desired import (
    FetchConfig, Mode, ModelFile, ModelFormat, ModelSourceInfo, ModelSpec, NodeConfig, RoleSpec,
    Runtime, ServeSpec,
)
from reconciler.core.observed import FetchObservation, FetchState
from reconciler.manifests.fleet import models_on
from reconciler.planner import fetchrungs
from reconciler.planner.ledger import Draft

GB = 10**9
CACHE = "/cache"
SHA = "a" * 64


def model(name: str = "qwen", size: int = 4 * GB, root: str | None = None) -> ModelSpec:
    return ModelSpec(name=name, format=ModelFormat.GGUF, root=root,
                     shards=(ModelFile(path="q.gguf", sha256=SHA, size=size),),
                     source=ModelSourceInfo(hf="org/q", revision="c" * 40))


def role(name: str, model_name: str = "qwen") -> RoleSpec:
    return RoleSpec(name=name, runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model=model_name,
                    serve=ServeSpec(port=8090))


def start(name: str) -> Draft:
    return Draft(decision=flat(role=name, verb=Verb.START, reason=Reason.MISSING,
                                   status=Status.LOADED, reserve=5 * GB))


def node(min_free: int = 10 * GB) -> NodeConfig:
    return NodeConfig(name="n1", fetch=FetchConfig(cache=CACHE, min_free=min_free))


def seen(state: FetchState, missing: int = 4 * GB, free: int | None = 38 * GB, **kw):
    return FetchObservation(model="qwen", generation="g", state=state, total=4 * GB,
                            missing=missing, free=free, **kw)


def gate(drafts, obs, n=None, roles=("coder",), models=None):
    n = n or node()
    specs = {r: role(r) for r in roles}
    models = models or {m.name: m for m in models_on((model(),), n)}
    return fetchrungs.gate(list(drafts), specs, models, {o.model: o for o in obs}, n)


def test_a_missing_model_plans_one_fetch_and_the_role_waits_fetching() -> None:
    """`> fetch qwen 4.0 GB (missing on this node; 38.0 GB free)`; the start becomes a wait
    that reserves no memory."""
    drafts, fetches = gate([start("coder")], [seen(FetchState.NEEDED)])
    (f,) = fetches
    assert (f.model, f.bytes, f.why) == ("qwen", 4 * GB, "missing on this node; 38.0 GB free")
    d = drafts[0].decision
    assert (d.verb, d.reason, d.status, d.reserve) == (Verb.WAIT, Reason.FETCHING,
                                                       Status.FETCHING, 0)


def test_a_model_in_the_cache_lets_the_start_through() -> None:
    """The does-nothing twin: fetched already, the start stands and nothing is fetched."""
    drafts, fetches = gate([start("coder")], [seen(FetchState.DONE, missing=0)])
    assert drafts[0].decision.verb is Verb.START and fetches == ()


def test_two_roles_on_one_model_share_one_fetch() -> None:
    """§1.6 two roles waiting for one Model share one fetch; both wait ``fetching``."""
    drafts, fetches = gate([start("a"), start("b")], [seen(FetchState.NEEDED)], roles=("a", "b"))
    assert len(fetches) == 1
    assert [d.decision.status for d in drafts] == [Status.FETCHING, Status.FETCHING]


def test_not_enough_disk_refuses_with_the_sizes() -> None:
    """4 GB + min_free 10 GB > 12 GB free: refused, no fetch planned."""
    drafts, fetches = gate([start("coder")], [seen(FetchState.NEEDED, free=12 * GB)])
    d = drafts[0].decision
    assert fetches == () and (d.verb, d.reason) == (Verb.REFUSE, Reason.NO_DISK)
    assert "4.0 GB + min_free 10.0 GB > 12.0 GB free in /cache" in d.detail


def test_just_enough_disk_is_enough() -> None:
    """The boundary: missing + min_free == free fetches."""
    _, fetches = gate([start("coder")], [seen(FetchState.NEEDED, free=14 * GB)])
    assert len(fetches) == 1


def test_a_running_fetch_shows_its_progress() -> None:
    """§1.6 while a fetch runs no new one starts; the start waits ``fetching`` with percent, rate
    and time left, polled."""
    drafts, fetches = gate([start("coder")], [seen(FetchState.RUNNING, missing=2 * GB,
                                                   rate=1.0 * GB)])
    d = drafts[0].decision
    assert fetches == () and d.status is Status.FETCHING and d.retry_in == fetchrungs.POLL
    assert d.detail == "fetching qwen: 50 %, 1.0 GB/s, 2s left"


def test_a_failed_fetch_refuses_and_says_how_to_retry() -> None:
    """§1.6 a failed fetch refuses the start (``fetch_failed``), saying why and how to retry."""
    drafts, fetches = gate([start("coder")], [seen(FetchState.FAILED, detail="sha256 mismatch")])
    d = drafts[0].decision
    assert fetches == () and (d.verb, d.reason, d.status) == (
        Verb.REFUSE, Reason.FETCH_FAILED, Status.REFUSED)
    assert "sha256 mismatch" in d.detail and "--retry qwen" in d.detail


def test_a_node_without_fetch_refuses_saying_the_model_has_a_source() -> None:
    """§1.6 on a node without ``fetch`` a Model that is not here is refused (``no_fetch``), saying
    it has a source and the node does not fetch."""
    n = NodeConfig(name="n2")
    drafts, fetches = gate([start("coder")], [], n=n, models={"qwen": model()})
    d = drafts[0].decision
    assert (d.verb, d.reason) == (Verb.REFUSE, Reason.NO_FETCH)
    assert "has a source" in d.detail and "n2 does not fetch" in d.detail


def test_a_node_without_fetch_but_a_copy_starts_from_the_copy() -> None:
    """The twin: a root (or model_roots) on a node that does not fetch is used as today."""
    n = NodeConfig(name="n2")
    drafts, _ = gate([start("coder")], [], n=n, models={"qwen": model(root="/srv/q")})
    assert drafts[0].decision.verb is Verb.START


def test_a_fetching_node_serves_a_sourced_model_from_its_cache_tree() -> None:
    """models_on: the root is <cache>/models/<name>/<generation>; model_roots still wins."""
    (m,) = models_on((model(),), node())
    assert m.root == f"{CACHE}/models/qwen/{model().fetch_generation('https://huggingface.co')}"
    n = NodeConfig(name="n", fetch=FetchConfig(cache=CACHE), model_roots=(("qwen", "/hand"),))
    assert models_on((model(),), n)[0].root == "/hand"


def test_a_new_revision_is_a_new_generation() -> None:
    """Another commit (or digest) makes another cache tree, so the role restarts onto it."""
    a = model()
    b = ModelSpec(name="qwen", format=ModelFormat.GGUF, shards=a.shards,
                  source=ModelSourceInfo(hf="org/q", revision="d" * 40))
    assert a.fetch_generation("https://h") != b.fetch_generation("https://h")


def test_a_stop_is_never_gated() -> None:
    """Only starts and restarts wait for a fetch."""
    stop = Draft(decision=flat(role="coder", verb=Verb.STOP, pid=4242, create_time=1.0, reason=Reason.REMOVED))
    drafts, fetches = gate([stop], [seen(FetchState.NEEDED)])
    assert drafts[0] is stop and fetches == ()


def test_a_restart_waiting_for_its_model_keeps_what_the_server_holds() -> None:
    """The running server stays: its memory and devices stay held; nothing new is claimed."""
    restart = Draft(decision=flat(role="coder", verb=Verb.RESTART, reason=Reason.SPEC_CHANGED,
                                      status=Status.RUNNING, reserve=5 * GB, pid=42, create_time=1.0,
                                      devices=(("gpu0", GB),)),
                    holds=5 * GB, devices=(("gpu0", GB),))
    (d,), _ = gate([restart], [seen(FetchState.NEEDED)])
    assert (d.decision.verb, d.decision.reserve, d.holds, d.devices, d.claim) == (
        Verb.WAIT, 0, 5 * GB, (("gpu0", GB),), None)
    assert d.decision.pid == 42 and d.decision.devices == (("gpu0", GB),)


def test_the_disk_check_counts_the_fetches_planned_before_it() -> None:
    """§1.6: two Models of 4 GB, min_free 10 GB, 16 GB free: each fits alone, both do not, so
    the second role is refused no_disk, naming the 4 GB fetched before it."""
    n = node()
    models = {m.name: m for m in models_on((model("qwen"), model("llama")), n)}
    specs = {"a": role("a", "qwen"), "b": role("b", "llama")}
    obs = {name: FetchObservation(model=name, generation="g", state=FetchState.NEEDED,
                                  total=4 * GB, missing=4 * GB, free=16 * GB)
           for name in ("qwen", "llama")}
    drafts, fetches = fetchrungs.gate([start("a"), start("b")], specs, models, obs, n)
    assert [f.model for f in fetches] == ["qwen"]
    d = drafts[1].decision
    assert (d.verb, d.reason) == (Verb.REFUSE, Reason.NO_DISK)
    assert "(+4.0 GB fetched before it)" in d.detail


def test_roles_waiting_for_one_model_share_its_fetch_and_its_disk() -> None:
    """§1.6: the second role on a Model already planned waits for that fetch: its bytes are not
    counted again (4 GB + min_free 10 GB fit 17 GB free once, not twice)."""
    drafts, fetches = gate([start("a"), start("b")], [seen(FetchState.NEEDED, free=17 * GB)],
                           roles=("a", "b"))
    assert [f.model for f in fetches] == ["qwen"]
    assert [(d.decision.verb, d.decision.status) for d in drafts] == [
        (Verb.WAIT, Status.FETCHING), (Verb.WAIT, Status.FETCHING)]


def test_a_draft_model_with_a_source_is_fetched_before_the_start() -> None:
    """§1.6: the main Model is here, the draft Model (speculative decoding) is not: the start
    waits and the draft Model's fetch is planned."""
    n = node()
    models = {m.name: m for m in models_on((model("qwen"), model("tiny")), n)}
    spec = RoleSpec(name="coder", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="qwen",
                    serve=ServeSpec(port=8090, draft_model="tiny"))
    obs = {"qwen": seen(FetchState.DONE, missing=0),
           "tiny": FetchObservation(model="tiny", generation="g", state=FetchState.NEEDED,
                                    total=GB, missing=GB, free=38 * GB)}
    drafts, fetches = fetchrungs.gate([start("coder")], {"coder": spec}, models, obs, n)
    assert [f.model for f in fetches] == ["tiny"]
    assert (drafts[0].decision.verb, drafts[0].decision.status) == (Verb.WAIT, Status.FETCHING)


def test_plan_runs_the_fetch_gate() -> None:
    """§1.6 through ``plan()`` (the fetch gate is a stage of the pipeline): a role whose Model
    is not on this node waits `fetching`, and the plan holds the one fetch to start."""
    from reconciler.core.decisions import PlanContext
    from reconciler.core.desired import Desired
    from reconciler.core.observed import Observed, Remembered
    from reconciler.planner.plan import plan
    n = node()
    desired = Desired(roles=(role("coder"),), models=models_on((model(),), n), node=n)
    p = plan(desired, Observed(fetches=(seen(FetchState.NEEDED),)), Remembered(),
             PlanContext(), 1000.0)
    (d,) = p.decisions
    assert (d.verb, d.reason, d.status) == (Verb.WAIT, Reason.FETCHING, Status.FETCHING)
    assert [f.model for f in p.fetches] == ["qwen"]
