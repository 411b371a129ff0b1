"""§13 a node's pass under a rollout (engine/rolloutpass.py): what a waiting node runs, the
gate asked only when its moment has come, a local rollback and its memory."""

from __future__ import annotations

import subprocess

import attrs
import pytest

from reconciler.core.observed import RoleRecord, Terminal
from reconciler.core.desired import Mode, Runtime
from reconciler.engine import rolloutpass
from reconciler.manifests.fleet import NodeChoice
from reconciler.manifests.rolloutdoc import parse_time
from reconciler.planner.rollout import GateAnswer, Take
from reconciler.repo import sources
from tests.fleet.worlds import files, model, node, role

ROLLOUT = {"apiVersion": "reconciler/v1", "kind": "Rollout", "metadata": {"name": "up"},
           "spec": {"start": "2026-12-02T14:00:00Z", "duration": "2h", "roles": ["coder"],
                    "waves": [{"name": "canary", "canary": True,
                               "node_selector": {"match_labels": {"ring": "canary"}}}],
                    "gate": {"prometheus": {"url": "http://127.0.0.1:9", "query": "up",
                                            "bake": "10m"}}}}
NODES = (node("gpu-1", labels={"ring": "canary"}),
         node("gpu-2", labels={"reconciler.io/rollout-position": "0.5"}), model())
BEFORE_START = parse_time("2026-12-02T13:00:00Z")
CANARY_TIME = parse_time("2026-12-02T14:05:00Z")
REST_TIME = parse_time("2026-12-02T15:40:00Z")


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


class Repo:
    def __init__(self, root) -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.manifests.mkdir(parents=True)
        git(root, "init", "-q")

    def commit(self, *docs) -> str:
        ((name, data),) = files(*docs)
        (self.manifests / name).write_bytes(data)
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "c")
        return git(self.root, "rev-parse", "HEAD")


class Asked:
    """A gate that records what it was asked and answers ``answer``."""

    def __init__(self, answer: GateAnswer | Exception) -> None:
        self.answer, self.asked = answer, []

    def ask(self, rollout, wave, *, revision, nodes):
        self.asked.append((rollout.name, wave, revision, tuple(nodes)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def a_pass(repo: Repo, state, name: str, now: float, *, ask=None, records=None, write=True):
    """What one applying pass of node ``name`` stages (and writes, like apply_pass)."""
    choice = NodeChoice(name=name, explicit=True)
    loaded = sources.load_desired([str(repo.manifests)], node=choice)
    assert loaded.ok, loaded.problems
    head = git(repo.root, "rev-parse", "HEAD")
    staged = rolloutpass.stage(paths=[str(repo.manifests)], fleet=loaded.fleet,
                               desired=loaded.desired, node=choice, head=head,
                               state_dir=str(state), records=records or {}, now=now,
                               ask=ask or Asked(GateAnswer(open=True, reason="healthy")))
    if write:
        rolloutpass.write_runs(str(state), staged.runs)
    return staged


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path / "repo")


def ctx(staged) -> int:
    return staged.desired.role("coder").serve.ctx


def test_a_node_whose_turn_has_not_come_keeps_the_spec_it_runs(repo, tmp_path) -> None:
    """§13: a staged change (ctx) reaches the canary at 14:00Z; the other node keeps the
    previous revision's spec (read from git) and says when it moves; no gate was asked
    before its moment."""
    for n in ("gpu-1", "gpu-2"):
        (tmp_path / n).mkdir()
    repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    for n in ("gpu-1", "gpu-2"):
        assert ctx(a_pass(repo, tmp_path / n, n, BEFORE_START)) == 4096
    head = repo.commit(*NODES, role("coder", 8001, ctx=8192), ROLLOUT)
    assert ctx(a_pass(repo, tmp_path / "gpu-1", "gpu-1", BEFORE_START)) == 4096
    canary = a_pass(repo, tmp_path / "gpu-1", "gpu-1", CANARY_TIME)
    assert ctx(canary) == 8192 and canary.runs["coder"].runs == head
    gate = Asked(GateAnswer(open=True, reason="healthy"))
    waiting = a_pass(repo, tmp_path / "gpu-2", "gpu-2", CANARY_TIME, ask=gate)
    assert ctx(waiting) == 4096 and waiting.choices["coder"].take is Take.PREVIOUS
    assert waiting.choices["coder"].reason == (
        "rollout up: wave canary first; this node moves at 15:30Z")
    assert gate.asked == []
    moved = a_pass(repo, tmp_path / "gpu-2", "gpu-2", REST_TIME, ask=gate)
    assert ctx(moved) == 8192
    assert gate.asked == [("up", "rest", head, ("gpu-1",))]


@pytest.mark.parametrize("answer", [GateAnswer(open=None, reason="Prometheus unreachable"),
                                    GateAnswer(open=False, reason="0 samples"),
                                    OSError("refused")])
def test_a_gate_that_is_closed_or_unreadable_holds(repo, tmp_path, answer) -> None:
    """§13: past its moment, a later wave's node moves only on an open gate; closed, unknown
    or a gate that raised: it keeps the previous spec and the plan says why."""
    (tmp_path / "s").mkdir()
    repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-2", BEFORE_START)
    repo.commit(*NODES, role("coder", 8001, ctx=8192), ROLLOUT)
    held = a_pass(repo, tmp_path / "s", "gpu-2", REST_TIME, ask=Asked(answer))
    assert ctx(held) == 4096
    assert "gate" in held.choices["coder"].reason


def test_a_pause_holds_and_a_revert_applies_at_once(repo, tmp_path) -> None:
    """§13: paused: the canary too keeps what it runs; a revert to what a node runs is
    no change at all, and reaches the waiting node at once."""
    (tmp_path / "s").mkdir()
    old = repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-1", BEFORE_START)
    paused = {**ROLLOUT, "spec": {**ROLLOUT["spec"], "paused": True}}
    repo.commit(*NODES, role("coder", 8001, ctx=8192), paused)
    assert ctx(a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME)) == 4096
    repo.commit(*NODES, role("coder", 8001, ctx=4096), paused)
    back = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME)
    assert ctx(back) == 4096 and back.choices["coder"].take is Take.NEW
    assert back.runs["coder"].runs != old  # HEAD now: the node runs it


def record(**kw) -> RoleRecord:
    return RoleRecord(name="coder", instance_id="i", runtime=Runtime.LLAMACPP,
                      mode=Mode.MANAGED, **kw)


def test_a_staged_revision_that_gave_up_is_rolled_back_and_not_retried(repo, tmp_path) -> None:
    """§13 local rollback: the canary's coder gave up on the new revision → the pass gives
    the planner the revision it ran before, says so, and keeps it while HEAD is the failed
    commit; a new commit is taken again and the rollback's metric ends."""
    (tmp_path / "s").mkdir()
    good = repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-1", BEFORE_START)
    bad = repo.commit(*NODES, role("coder", 8001, ctx=8192), ROLLOUT)
    assert ctx(a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME)) == 8192
    gave_up = {"coder": record(terminal=Terminal.GAVE_UP, started_at=CANARY_TIME + 5)}
    back = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 60, records=gave_up)
    assert ctx(back) == 4096
    assert [(r, run.runs, run.failed) for r, run in back.rollbacks] == [("coder", good, bad)]
    assert back.choices["coder"].reason.startswith(f"rolled back: {bad[:12]} gave up")
    assert back.rolled_back() == (("coder", bad),) and back.revisions() == (("coder", good),)
    again = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 120)
    assert ctx(again) == 4096 and again.rollbacks == ()
    repo.commit(*NODES, role("coder", 8001, ctx=6144), ROLLOUT)
    fixed = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 180)
    assert ctx(fixed) == 6144 and fixed.rolled_back() == ()  # the rollback is history


def test_a_staged_revision_never_ready_within_the_bake_is_rolled_back(repo, tmp_path) -> None:
    """§13: a role that has not answered ``bake`` seconds after it moved goes back too."""
    (tmp_path / "s").mkdir()
    repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-1", BEFORE_START)
    repo.commit(*NODES, role("coder", 8001, ctx=8192), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME)
    starting = {"coder": record(started_at=CANARY_TIME)}
    assert ctx(a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 300, records=starting)) == 8192
    late = a_pass(repo, tmp_path / "s", "gpu-1", CANARY_TIME + 601, records=starting)
    assert ctx(late) == 4096 and "not ready within the bake (600s)" in late.rollbacks[0][1].why


def test_an_unreadable_state_file_means_the_node_runs_head(repo, tmp_path) -> None:
    """rollout.json torn or garbage (it never is: it is replaced whole) → nothing known:
    the node takes HEAD rather than guess a revision."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / rolloutpass.FILE).write_text("{not json")
    repo.commit(*NODES, role("coder", 8001, ctx=8192), ROLLOUT)
    assert ctx(a_pass(repo, tmp_path / "s", "gpu-2", CANARY_TIME)) == 8192
    assert rolloutpass.read_runs(str(tmp_path / "s"))["coder"].before is None


def test_metrics_say_the_revision_a_staged_role_runs_and_each_rollback():
    """§13: reconciler_role_revision of a role kept at its previous revision names that
    revision (not HEAD: the gate must not count a waiting node as moved), and
    reconciler_rollout_rolled_back{role,revision} is 1 for a rollback in force."""
    from reconciler.report import metrics
    from tests.fleet.test_metrics import series
    from tests.support.fakes import desired, good, keep

    result = attrs.evolve(good(desired("coder", "chat"), keep("coder"), keep("chat")),
                          git_commit="new", revisions=(("coder", "old"),),
                          rolled_back=(("coder", "new"),))
    text = metrics.render_result(result, None)
    got = series(text, "reconciler_role_revision")
    assert {dict(k)["role"]: dict(k)["revision"] for k in got} == {"coder": "old", "chat": "new"}
    assert series(text, "reconciler_rollout_rolled_back") == {
        (("node", "test-node"), ("revision", "new"), ("role", "coder")): 1}


def test_the_status_page_shows_the_node_place_in_each_rollout():
    """§13 the status page, like `status`, shows the node's rollout line (escaped)."""
    from reconciler.report import page
    from reconciler.report.snapshot import Snapshot

    line = "Rollout up: wave rest, moves at 15:30Z: wave canary first; <b>x</b>"
    html = page.render(Snapshot(node="gpu-2", rollout=(line,)), live=False)
    assert "<li>Rollout up: wave rest, moves at 15:30Z: wave canary first; &lt;b&gt;x&lt;/b&gt;</li>" in html
    assert 'id="rollout"' not in page.render(Snapshot(node="gpu-2"), live=False)


def test_a_waiting_role_keeps_the_model_it_runs_when_head_renamed_it(repo, tmp_path) -> None:
    """§13: HEAD moves coder to a renamed Model (qwen → qwen2, a staged change); the waiting
    node keeps coder on qwen, and the pass's desired state still declares qwen."""
    (tmp_path / "s").mkdir()
    repo.commit(*NODES, role("coder", 8001, ctx=4096), ROLLOUT)
    a_pass(repo, tmp_path / "s", "gpu-2", BEFORE_START)
    nodes = tuple(d for d in NODES if d["kind"] != "Model")
    repo.commit(*nodes, model("qwen2"), role("coder", 8001, ctx=4096, model_name="qwen2"), ROLLOUT)
    waiting = a_pass(repo, tmp_path / "s", "gpu-2", CANARY_TIME)
    assert waiting.desired.role("coder").model == "qwen"
    assert {m.name for m in waiting.desired.models} == {"qwen", "qwen2"}


def test_a_rollout_removed_then_added_again_starts_from_what_the_node_runs(tmp_path) -> None:
    """§13: an applying pass with no Rollout in HEAD forgets rollout.json, so a Rollout added
    later does not send the node back to the commit it ran under the first one; a pass on
    watch's last good state (no fleet loaded) forgets nothing."""
    from reconciler.engine import loop
    from reconciler.state.store import Store

    repo = Repo(tmp_path / "repo")
    state = tmp_path / "s"
    state.mkdir()
    repo.commit(*NODES, role("coder", 8001, ctx=4096, state="stopped"), ROLLOUT)
    a_pass(repo, state, "gpu-2", BEFORE_START)
    assert (state / rolloutpass.FILE).exists()
    repo.commit(*NODES, role("coder", 8001, ctx=4096, state="stopped"))
    with Store(str(state)) as store:
        inputs = loop.PassInputs(paths=[str(repo.manifests)], store=store, state_dir=str(state),
                                 node=NodeChoice(name="gpu-2", explicit=True))
        result = loop.apply_pass(inputs)
        assert result.ok and (state / rolloutpass.FILE).exists() is False
        rolloutpass.write_runs(str(state), {"coder": rolloutpass.RoleRun(runs="x")})
        loop.apply_pass(attrs.evolve(inputs, desired=result.desired))
        assert (state / rolloutpass.FILE).exists()
