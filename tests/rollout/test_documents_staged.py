"""§13 a Model or Program document changed under the same name is staged like a spec change:
the waiting node keeps the documents it runs (read from git at its commit), beside HEAD's
for the roles that take HEAD, without a new instance id, launch or served name."""

from __future__ import annotations

import attrs
from hypothesis import given, settings, strategies as st

from reconciler.core.desired import Desired, ModelFile, ProgramSpec, Runtime, WantedState, kept_name
from reconciler.core.observed import Terminal
from reconciler.planner import identity
from reconciler.planner import rollout as ro
from reconciler.planner.rollout import Kind, Take, Version
from tests.fleet.worlds import model, node, role
from tests.rollout.test_node_pass import (BEFORE_START, CANARY_TIME, REST_TIME, ROLLOUT, a_pass,
                                          record, repo)  # noqa: F401 (the fixture)
from tests.support.fakes import role_spec

SHA_A, SHA_B = "a" * 64, "b" * 64


def program(version: str, sha: str, root: str = "/opt/llama") -> dict:
    return {"apiVersion": "reconciler/v1", "kind": "Program", "metadata": {"name": "llama"},
            "spec": {"runtime": "llamacpp", "version": version, "root": root,
                     "entrypoint": "llama-server",
                     "files": [{"path": "llama-server", "size": 1, "sha256": sha}]}}


def weights(sha: str, name: str = "qwen") -> dict:
    doc = model(name)
    doc["spec"]["shards"][0]["sha256"] = sha
    return doc


PINNED = {"serve_programs": {"llamacpp": "llama"}}
NODES = (node("gpu-1", labels={"ring": "canary"}, extra=PINNED),
         node("gpu-2", labels={"reconciler.io/rollout-position": "0.5"}, extra=PINNED))


def launch(d: Desired, name: str):
    spec = d.role(name)
    return identity.launch(spec, {m.name: m for m in d.models}, d.node, {}, "/data",
                           d.programs)


def version(d: Desired, name: str = "coder") -> str | None:
    found = d.program_for(d.role(name))
    return found.version if found is not None else None


# ------------------------------------------------------------------ pure: which changes wait

def _program(version: str, sha: str) -> ProgramSpec:
    return ProgramSpec(name="llama", runtime=Runtime.LLAMACPP, version=version,
                       entrypoint="x", root="/p", files=(ModelFile(path="x", sha256=sha, size=1),))


def test_golden_document_changes() -> None:
    """§13 golden: the same spec with another Program or Model document under the same name
    is staged (and says which); the same documents are no change; a revert of the document
    to what the node ran before, a removal and a stop apply at once."""
    spec = role_spec("coder")
    old = Version(spec=spec, documents=(("program", "llama", _program("b1", SHA_A)),))
    new = Version(spec=spec, documents=(("program", "llama", _program("b2", SHA_B)),))
    model_new = Version(spec=spec, documents=(("program", "llama", _program("b1", SHA_A)),
                                              ("model", "qwen", "other weights")))
    stopped = attrs.evolve(new, spec=attrs.evolve(spec, state=WantedState.STOPPED))
    cases = [
        (old, new, None, Kind.STAGED, "changes Program llama"),
        (attrs.evolve(old, documents=(*old.documents, ("model", "qwen", "weights"))),
         model_new, None, Kind.STAGED, "changes Model qwen"),
        (old, attrs.evolve(old), None, Kind.SAME, "unchanged"),
        (new, old, old, Kind.AT_ONCE, "a revert to what this node ran before"),
        (old, None, None, Kind.AT_ONCE, "role removed"),
        (old, stopped, None, Kind.AT_ONCE, "state: stopped"),
        (None, new, None, Kind.AT_ONCE, "new on this node: nothing runs to keep"),
    ]
    for runs, now, before, kind, reason in cases:
        got = ro.change(runs, now, before=before)
        assert (got.kind, got.reason) == (kind, reason), (runs, now, before)


# ------------------------------------------------------------------ a node's pass

def test_a_program_change_reaches_the_canary_only_until_the_rest_moves(repo, tmp_path) -> None:
    """§13: the Program `llama` (serve_programs) gets a new build under the same name: the
    canary runs it at its moment, gpu-2 keeps the build it runs — same launch, same instance
    id — and says why, until its own moment."""
    for n in ("gpu-1", "gpu-2"):
        (tmp_path / n).mkdir()
    repo.commit(*NODES, model(), role("coder", 8001), program("b1", SHA_A), ROLLOUT)
    runs = {n: a_pass(repo, tmp_path / n, n, BEFORE_START) for n in ("gpu-1", "gpu-2")}
    repo.commit(*NODES, model(), role("coder", 8001), program("b2", SHA_B), ROLLOUT)
    canary = a_pass(repo, tmp_path / "gpu-1", "gpu-1", CANARY_TIME)
    assert version(canary.desired) == "b2"
    waiting = a_pass(repo, tmp_path / "gpu-2", "gpu-2", CANARY_TIME)
    assert version(waiting.desired) == "b1"
    assert waiting.choices["coder"].take is Take.PREVIOUS
    assert launch(waiting.desired, "coder") == launch(runs["gpu-2"].desired, "coder")
    assert waiting.runs["coder"].runs == git_head(repo, "HEAD~1")
    assert version(a_pass(repo, tmp_path / "gpu-2", "gpu-2", REST_TIME).desired) == "b2"


def git_head(repo, rev: str) -> str:
    from tests.rollout.test_node_pass import git

    return git(repo.root, "rev-parse", rev)


def test_a_kept_program_and_model_beside_heads_keep_the_roles_identity(repo, tmp_path) -> None:
    """§13: chat (no rollout stages it) takes HEAD's new `llama` build and `qwen` weights at
    once; coder, waiting, keeps its commit's documents beside them under kept names — and
    its instance id, launch (argv, environment, so no restart), served name and routes stay
    exactly those it runs; nothing new is fetched for it (its Model's root is its commit's)."""
    from reconciler.core.decisions import Plan
    from reconciler.router import rules

    (tmp_path / "s").mkdir()
    draft = {"draft_model": "tiny"}
    docs = (*NODES, model("tiny"), role("chat", 8002))
    coder = role("coder", 8001)
    coder["spec"]["serve"].update(draft)
    first = repo.commit(*docs, weights(SHA_A), coder, program("b1", SHA_A), ROLLOUT)
    before = a_pass(repo, tmp_path / "s", "gpu-2", BEFORE_START)
    repo.commit(*docs, weights(SHA_B), coder, program("b2", SHA_B, root="/opt/b2"), ROLLOUT)
    waiting = a_pass(repo, tmp_path / "s", "gpu-2", CANARY_TIME)
    d = waiting.desired
    assert version(d, "chat") == "b2" and version(d, "coder") == "b1"
    assert d.program_for(d.role("coder")).name == kept_name("llama", first)
    assert d.role("coder").model == kept_name("qwen", first)
    assert d.role("coder").serve.draft_model == "tiny"  # the same document: not renamed
    assert d.model(d.role("chat").model).shards[0].sha256 == SHA_B
    old = before.desired
    assert identity.instance_id(d.role("coder")) == identity.instance_id(old.role("coder"))
    assert launch(d, "coder") == launch(old, "coder")
    assert launch(d, "chat") != launch(old, "chat")  # HEAD's, at once
    table = rules.routes(Plan(decisions=()), d)
    assert all(not n.count("@") for r in table.routes for n in r.names)


def test_a_program_rollback_goes_back_to_the_documents_it_ran(repo, tmp_path) -> None:
    """§13 local rollback: the canary gave up on the new build → back to the Program it ran
    (from git, at `before`), kept while HEAD is that commit; reverting the Program in git
    applies at once on a waiting node."""
    (tmp_path / "s").mkdir()
    (tmp_path / "w").mkdir()
    repo.commit(*NODES, model(), role("coder", 8001), program("b1", SHA_A), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-1", BEFORE_START)
    a_pass(repo, tmp_path / "w", "gpu-2", BEFORE_START)
    repo.commit(*NODES, model(), role("coder", 8001), program("b2", SHA_B), ROLLOUT)
    assert version(a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME).desired) == "b2"
    gave_up = {"coder": record(terminal=Terminal.GAVE_UP, started_at=CANARY_TIME + 5)}
    back = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 60, records=gave_up)
    assert version(back.desired) == "b1" and back.rollbacks
    assert version(a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 120).desired) == "b1"
    assert version(a_pass(repo, tmp_path / "w", "gpu-2", CANARY_TIME).desired) == "b1"
    repo.commit(*NODES, model(), role("coder", 8001), program("b1", SHA_A), ROLLOUT)
    reverted = a_pass(repo, tmp_path / "w", "gpu-2", CANARY_TIME + 180)
    assert version(reverted.desired) == "b1" and reverted.choices["coder"].take is Take.NEW


def test_a_stop_and_a_removal_apply_at_once_with_a_new_program(repo, tmp_path) -> None:
    """§13: a new build together with `state: stopped` stops the role at once on a waiting
    node (stopping never waits for a wave)."""
    (tmp_path / "s").mkdir()
    repo.commit(*NODES, model(), role("coder", 8001), program("b1", SHA_A), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-2", BEFORE_START)
    repo.commit(*NODES, model(), role("coder", 8001, state="stopped"), program("b2", SHA_B),
                ROLLOUT)
    stopped = a_pass(repo, tmp_path / "s", "gpu-2", CANARY_TIME)
    assert stopped.choices["coder"].take is Take.NEW
    assert str(stopped.desired.role("coder").state) == "stopped"


# ------------------------------------------------------------------ the property

@settings(max_examples=12, deadline=None)
@given(times=st.lists(st.floats(min_value=BEFORE_START, max_value=REST_TIME + 7200),
                      min_size=1, max_size=4).map(sorted),
       which=st.sampled_from(["program", "model"]),
       name=st.sampled_from(["gpu-1", "gpu-2"]))
def test_a_node_never_runs_a_document_its_wave_has_not_reached(tmp_path_factory, times, which,
                                                                name) -> None:
    """§13 property: through passes at any times, a node runs HEAD's Program or Model
    document only once its turn has come (its moment, and the gate — open here — for a
    later wave); before, exactly the one it ran."""
    from tests.rollout.test_node_pass import Repo

    base = tmp_path_factory.mktemp("p")
    repo_ = Repo(base / "repo")
    (base / "s").mkdir()
    repo_.commit(*NODES, weights(SHA_A), role("coder", 8001), program("b1", SHA_A), ROLLOUT)
    a_pass(repo_, base / "s", name, BEFORE_START)
    changed = (weights(SHA_A), program("b2", SHA_B)) if which == "program" else (
        weights(SHA_B), program("b1", SHA_A))
    repo_.commit(*NODES, role("coder", 8001), *changed, ROLLOUT)
    labels = dict(a_pass(repo_, base / "s", name, BEFORE_START, write=False).desired.node.labels)
    (doc,) = _rollouts(repo_, name)
    for now in times:  # (healthy at every pass: no bake rollback)
        staged = a_pass(repo_, base / "s", name, now,
                        records={"coder": record(healthy_since=now)})
        d = staged.desired
        on_head = (version(d) == "b2" if which == "program"
                   else d.model(d.role("coder").model).shards[0].sha256 == SHA_B)
        moment = ro.place(doc, name, labels).at
        assert on_head == (now >= moment), (name, now, moment)


def _rollouts(repo_, name: str):
    from reconciler.manifests.fleet import NodeChoice
    from reconciler.repo import sources

    loaded = sources.load_desired([str(repo_.manifests)], node=NodeChoice(name=name,
                                                                          explicit=True))
    return loaded.fleet.rollouts



def test_fleet_diff_marks_a_document_change_a_rollout_stages() -> None:
    """§13 `fleet --diff`: a new build of the Program `llama` is marked staged on the role
    the Rollout covers (coder), not on chat (no Rollout stages it), nor on a role the same
    commit stops (a stop applies at once)."""
    from reconciler.fleet import fleetdiff, fleetview
    from tests.fleet.test_offline import fleet_of

    pinned = node("gpu-1", extra=PINNED)
    old = fleet_of(pinned, model(), role("coder", 8001), role("chat", 8002), program("b1", SHA_A),
                   ROLLOUT)
    new = fleet_of(pinned, model(), role("coder", 8001), role("chat", 8002), program("b2", SHA_B),
                   ROLLOUT)
    view = fleetview.view(new)
    got = fleetdiff.staged(fleetdiff.diff(fleetview.view(old), view), view, new.rollouts)
    assert [str(c) for c in got] == ["~ gpu-1 chat (program b1 → b2)",
                                     "~ gpu-1 coder (program b1 → b2; staged: Rollout up)"]
    stop = fleet_of(pinned, model(), role("coder", 8001, state="stopped"), role("chat", 8002),
                    program("b2", SHA_B), ROLLOUT)
    view = fleetview.view(stop)
    got = fleetdiff.staged(fleetdiff.diff(fleetview.view(old), view), view, stop.rollouts)
    assert not any("staged" in str(c) for c in got), [str(c) for c in got]
