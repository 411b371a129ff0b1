"""§13 a node's pass under a rollout: which revision of each staged role it runs (SHELL).

``stage`` runs between load and plan when HEAD's manifests have a Rollout and
the checkout's commit is known. Per role the rollout covers it reads, from
``rollout.json`` in the state directory, the commit whose spec the node runs
(``runs``), the one it ran before (``before``, kept for a rollback) and the
commit that failed here (``failed``). The specs of those commits come from git
(``repo/gitrev``: one ``git archive`` of the manifest path per commit other
than HEAD), so the durable fact is a commit hash, never a copy of a spec.

``planner/rollout.choose`` then says, per role, take HEAD's spec or keep the
one it runs; the gates it needs (``gates_to_ask``) are asked first, here, and
a gate that cannot be read holds. A role kept at its previous spec is given to
the planner as that spec (so nothing restarts) and its keep reads
``rollout: …`` in the plan.

**Local rollback.** A role that moved to a staged revision and then reached
``gave-up`` there, or has not answered ``bake`` seconds after it moved (the
rollout's gate's bake), goes back to ``before`` — its spec read from git, the
model files it used still on disk — and ``failed`` names the revision: the
node does not take it again until HEAD is another commit. A ``rollback``
event says so, ``status`` shows it and ``reconciler_rollout_rolled_back``
exports it, which is what closes the gate for the later waves.

**kill -9.** ``rollout.json`` is replaced whole (a temporary file, fsync,
rename) before the pass acts, and the pass only ever gives the planner one
revision's spec per role: a pass killed anywhere leaves the file at the old or
the new choice, and the next pass converges each role on that one revision.

Size: the state file, the revisions read from git, the gates and the rollback
are one pass's view of a rollout; split, each part would pass the others its
whole state.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Mapping

import attrs

from reconciler.core.decisions import Decision, Keep, Plan, Reason
from reconciler.core.desired import Desired, RoleSpec, kept_name
from reconciler.core.observed import RoleRecord, Terminal
from reconciler.manifests.fleet import Fleet, NodeChoice
from reconciler.planner import rollout as schedule
from reconciler.planner.rollout import GateAnswer, Take

FILE = "rollout.json"


class RoleRun:
    """What ``rollout.json`` keeps of one staged role.

    A plain class, like ``Staged``: every ``--once`` under a rollout makes them, and an
    attrs class costs a cron run its creation (the 1.2x budget of issue 30).
    """

    __slots__ = ("runs", "before", "moved_at", "failed", "rolled_back_at", "why")
    FIELDS = __slots__

    def __init__(self, *, runs: str, before: str | None = None, moved_at: float | None = None,
                 failed: str | None = None, rolled_back_at: float | None = None,
                 why: str = "") -> None:
        self.runs = runs  # the commit whose spec the node runs
        self.before = before  # the commit it ran before (a rollback goes there)
        self.moved_at = moved_at  # when it took ``runs`` as a staged change (the wall clock)
        self.failed = failed  # a commit rolled back here: not taken again while HEAD
        self.rolled_back_at = rolled_back_at
        self.why = why  # why it rolled back

    def evolve(self, **changes) -> "RoleRun":
        return RoleRun(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoleRun) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"RoleRun({self.as_dict()})"


class Staged:
    """What ``stage`` decided for a pass."""

    __slots__ = ("desired", "choices", "runs", "rollbacks", "position")

    def __init__(self, *, desired: Desired, choices: Mapping[str, schedule.Choice],
                 runs: Mapping[str, RoleRun], rollbacks: tuple[tuple[str, RoleRun], ...] = (),
                 position: tuple[str, ...] = ()) -> None:
        self.desired = desired  # HEAD's share, with the kept roles' previous specs
        self.choices = choices
        self.runs = runs  # what ``rollout.json`` becomes (written before acting)
        self.rollbacks = rollbacks  # roles rolled back by this pass
        self.position = position  # `status`: the node's place in each rollout

    def revisions(self) -> tuple[tuple[str, str], ...]:
        """(role, commit it runs) of each staged role: ``reconciler_role_revision``."""
        return tuple((role, run.runs) for role, run in sorted(self.runs.items()))

    def rolled_back(self) -> tuple[tuple[str, str], ...]:
        """(role, failed commit) of each rollback in force: ``reconciler_rollout_rolled_back``."""
        return tuple((role, run.failed) for role, run in sorted(self.runs.items()) if run.failed)


def read_runs(state_dir: str) -> dict[str, RoleRun]:
    """``rollout.json``; unreadable or absent: nothing known (every role runs HEAD)."""
    try:
        with open(os.path.join(state_dir, FILE), encoding="utf-8") as f:
            raw = json.load(f)
        return {role: RoleRun(**{k: v for k, v in fields.items() if k in RoleRun.FIELDS})
                for role, fields in raw.get("roles", {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def forget(state_dir: str) -> None:
    """No rollout in HEAD (or no commit known): what ``rollout.json`` said is over; a
    Rollout added later starts from what the node runs then, not from a stale commit."""
    try:
        os.unlink(os.path.join(state_dir, FILE))
    except FileNotFoundError:
        pass


def write_runs(state_dir: str, runs: Mapping[str, RoleRun]) -> None:
    """Replace ``rollout.json`` whole (atomic: a kill leaves the old or the new file)."""
    body = {"roles": {role: run.as_dict() for role, run in sorted(runs.items())}}
    fd, tmp = tempfile.mkstemp(prefix=".rollout.", dir=state_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(state_dir, FILE))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class _Revisions:
    """This node's share of the manifests at other commits, each read from git once."""

    def __init__(self, paths, node: NodeChoice | None, head: str, desired: Desired) -> None:
        self._paths, self._node = paths, node
        self._seen: dict[str, Desired | None] = {head: desired}

    def at(self, commit: str | None) -> Desired | None:
        if commit is None:
            return None
        if commit not in self._seen:
            self._seen[commit] = self._load(commit)
        return self._seen[commit]

    def version(self, commit: str | None, name: str) -> schedule.Version | None:
        """The role as ``commit`` has it on this node: its spec and its Model and Program
        documents (§13: another document under the same name is a staged change too)."""
        at = self.at(commit)
        spec = at.role(name) if at is not None else None
        return schedule.version_of(at, spec) if spec is not None else None

    def readable(self, commit: str) -> bool:
        return self.at(commit) is not None

    def _load(self, commit: str) -> Desired | None:
        from reconciler.core.errors import RevisionError
        from reconciler.manifests import loader
        from reconciler.repo import gitrev

        where: dict[str, tuple[str, str]] = {}
        try:
            files, refused = gitrev.manifests_at(commit, self._paths, where)
        except RevisionError:
            return None  # gone from the checkout (a force-push): HEAD it is
        if refused:
            return None
        # It loaded before (a node records only a revision it applied): no schema pass.
        loaded = loader.load(files, schema_checked=True, node=self._node,
                             repo_files=gitrev.RepoFilesAt(commit, where))
        return loaded.desired if loaded.ok else None


def stage(*, paths, fleet: Fleet, desired: Desired, node: NodeChoice | None, head: str,
          state_dir: str, records: Mapping[str, RoleRecord], now: float,
          wall: float | None = None, ask=None) -> Staged:
    """The pass's desired state under HEAD's rollouts, and what ``rollout.json`` becomes.

    ``now``: the schedule's time; ``wall``: the clock the store's records were written by
    (when a role moved, the bake; ``now`` unless a rehearsal set the schedule's clock);
    ``records``: the store's role records (a rollback reads their terminal state);
    ``ask``: the gate (``world/gate.PrometheusAsk`` unless a test gives another).
    """
    wall = now if wall is None else wall
    rollouts = fleet.rollouts
    name = node.name if node is not None else desired.node.name
    labels = dict(desired.node.labels)
    known = read_runs(state_dir)
    revisions = _Revisions(paths, node, head, desired)
    new = {r.name: schedule.version_of(desired, r) for r in desired.roles}
    covered = sorted(r for r in set(new) | set(known) if schedule.rollout_for(rollouts, r))
    runs_spec: dict[str, schedule.Version] = {}
    before_spec: dict[str, schedule.Version] = {}
    state: dict[str, RoleRun] = {}
    rollbacks: list[tuple[str, RoleRun]] = []
    for role in covered:
        run = known.get(role)
        if run is None or not revisions.readable(run.runs):
            run = RoleRun(runs=head)  # nothing known: the node runs what it is given
        back = _rolled_back(role, run, records.get(role), schedule.rollout_for(rollouts, role),
                            wall)
        if back is not None and revisions.readable(back.runs):  # (gone: nothing to go back to)
            rollbacks.append((role, back))
            run = back
        if run.failed is not None and run.failed != head:
            run = run.evolve(failed=None)  # a new commit: it may be taken again
        state[role] = run
        spec = revisions.version(run.runs, role)
        if spec is not None:
            runs_spec[role] = spec
        earlier = revisions.version(run.before, role)
        if earlier is not None:
            before_spec[role] = earlier
    staged_new = {r: s for r, s in new.items() if r in state}
    wanted = schedule.gates_to_ask(runs_spec, staged_new, rollouts=rollouts, node=name,
                                   labels=labels, now=now, before=before_spec)
    gates = _ask(wanted, fleet, head, ask)
    choices = schedule.choose(runs_spec, staged_new, rollouts=rollouts, node=name,
                              labels=labels, now=now, gates=gates, before=before_spec)
    roles = {name: version.spec for name, version in new.items()}
    kept: dict[str, str] = {}  # role → the commit whose spec and documents it keeps
    for role in covered:
        run, choice = state[role], choices.get(role)
        if run.failed == head and role in runs_spec and role in new:
            choice = schedule.Choice(role=role, take=Take.PREVIOUS, reason=(
                f"rolled back: {head[:12]} {run.why or 'failed here'};"
                " waits for a new commit"))
            choices[role] = choice
        if choice is None:
            continue
        if choice.take is Take.PREVIOUS and role in runs_spec:
            roles[role] = runs_spec[role].spec
            if run.runs != head:
                kept[role] = run.runs
        elif run.runs != head:
            kind = schedule.change(runs_spec.get(role), new.get(role),
                                   before=before_spec.get(role)).kind
            if kind is schedule.Kind.STAGED:  # it moves: what it ran is kept for a rollback
                state[role] = run.evolve(runs=head, before=run.runs, moved_at=wall)
            elif kind is schedule.Kind.SAME:  # the same spec at a later commit
                state[role] = run.evolve(runs=head)
            else:  # at once (a revert, a stop, new here): nothing to roll back to
                state[role] = run.evolve(runs=head, moved_at=None)
    for role in list(state):
        if role not in new and role not in runs_spec:
            del state[role]  # gone from the node and from what it runs
    return Staged(desired=_resolved(desired, roles, kept, revisions),
                  choices=choices, runs=state,
                  rollbacks=tuple(rollbacks),
                  position=_position(rollouts, name, labels, now, gates, state, head))


def _resolved(desired: Desired, roles: Mapping[str, RoleSpec], kept: Mapping[str, str],
              revisions: _Revisions) -> Desired:
    """HEAD's share with each kept role resolved to its own commit's Model and Program
    documents (§13), the other roles to HEAD's.

    A kept document that differs from HEAD's of the same name takes the name's place when
    no role on HEAD's documents uses that name here (nothing else changes: the role's
    Model is named as it was); else it goes by ``kept_name`` beside HEAD's and the kept
    role names it so. Either way the role's instance id, launch and served name stay
    those it runs (they read ``document_name``), and its files are the ones already on
    disk: a kept document's root is its commit's, so nothing is fetched or removed.
    """
    out = {name: roles[name] for name in sorted(roles)}
    if not kept:
        return attrs.evolve(desired, roles=tuple(out.values()))
    tables = {"model": {m.name: m for m in desired.models},
              "program": {p.name: p for p in desired.programs}}
    on_head = {(kind, name) for role, spec in out.items() if role not in kept
               for kind, name, _ in schedule.version_of(desired, spec).documents}
    claimed: set[tuple[str, str]] = set()
    for role in sorted(kept):
        at = revisions.at(kept[role])
        if at is None:  # (read a moment ago: its Version came from it)
            continue
        spec = out[role]
        renamed: dict[tuple[str, str], str] = {}
        for kind, name, doc in schedule.version_of(at, spec).documents:
            table = tables[kind]
            if doc is None or table.get(name) == doc:
                continue  # a path, or HEAD's document is the one it runs
            if (kind, name) in on_head or (kind, name) in claimed:
                alias = renamed[kind, name] = kept_name(name, kept[role])
                table[alias] = attrs.evolve(doc, name=alias)
            else:
                table[name] = doc
                claimed.add((kind, name))
        out[role] = _renamed(spec, renamed, at, desired)
    return attrs.evolve(desired, roles=tuple(out.values()),
                        models=tuple(tables["model"][m] for m in sorted(tables["model"])),
                        programs=tuple(tables["program"][p] for p in sorted(tables["program"])))


def _renamed(spec: RoleSpec, renamed: Mapping[tuple[str, str], str], at: Desired,
             head: Desired) -> RoleSpec:
    """``spec`` naming its kept documents' ``kept_name``s, and the Program its commit's
    NodeConfig gave it when HEAD's NodeConfig gives another (its ``spec.program``)."""
    program = spec.program or at.node.serve_program(spec.runtime)
    if program is not None:
        program = renamed.get(("program", program), program)
        if program != (spec.program or head.node.serve_program(spec.runtime)):
            spec = attrs.evolve(spec, program=program)
    if not any(kind == "model" for kind, _ in renamed):
        return spec

    def name(n: str | None) -> str | None:
        return renamed.get(("model", n), n) if n else n

    serve = spec.serve
    return attrs.evolve(spec, model=name(spec.model), serve=attrs.evolve(
        serve, draft_model=name(serve.draft_model), mmproj=name(serve.mmproj),
        adapter=name(serve.adapter),
        loras=tuple(attrs.evolve(x, model=name(x.model)) for x in serve.loras)))


def _rolled_back(role: str, run: RoleRun, rec: RoleRecord | None, rollout,
                 now: float) -> RoleRun | None:
    """``run`` rolled back, when the revision the role moved to failed here (else None)."""
    if run.before is None or run.runs == run.before or run.moved_at is None:
        return None
    why = ""
    if rec is not None and rec.terminal is Terminal.GAVE_UP and (
            rec.started_at is None or rec.started_at >= run.moved_at - 1):
        why = "gave up"
    bake = rollout.gate.bake if rollout is not None and rollout.gate is not None else 0.0
    if not why and bake > 0 and now - run.moved_at > bake and (
            rec is None or rec.healthy_since is None or rec.healthy_since < run.moved_at):
        why = f"not ready within the bake ({bake:g}s)"
    if not why:
        return None
    return RoleRun(runs=run.before, before=None, moved_at=None, failed=run.runs,
                   rolled_back_at=now, why=why)


def _ask(wanted, fleet: Fleet, head: str, ask) -> dict[tuple[str, str], GateAnswer]:
    if not wanted:
        return {}
    from reconciler.fleet import rolloutview

    if ask is None:
        from reconciler.world.gate import PrometheusAsk

        ask = PrometheusAsk()
    asked = {(r.name, wave): (r, nodes) for r, wave, nodes in rolloutview.questions(fleet)}
    out: dict[tuple[str, str], GateAnswer] = {}
    for key in wanted:
        if key not in asked:
            out[key] = GateAnswer(open=None, reason="no gate question for this wave")
            continue
        rollout, nodes = asked[key]
        try:
            out[key] = ask.ask(rollout, key[1], revision=head, nodes=nodes)
        except Exception as err:  # noqa: BLE001 - an unreadable gate holds, never goes
            out[key] = GateAnswer(open=None, reason=f"gate failed: {err}")
    return out


def _position(rollouts, name: str, labels: Mapping[str, str], now: float, gates,
              state: Mapping[str, RoleRun], head: str) -> tuple[str, ...]:
    lines = []
    for r in rollouts:
        mine = {w: a for (n, w), a in gates.items() if n == r.name}
        step = schedule.turn(r, name, labels, now, mine)
        waiting = sorted(role for role, run in state.items() if r.covers(role) and run.runs != head)
        back = sorted(role for role, run in state.items() if r.covers(role) and run.failed == head)
        line = (f"Rollout {r.name}: wave {step.place.wave_name}, moves at "
                f"{schedule.clock(step.place.at, now)}: "
                + ("moved" if step.moves else step.reason))
        if waiting:
            line += f"; runs the previous revision of {', '.join(waiting)}"
        if back:
            line += f"; rolled back {', '.join(back)}"
        lines.append(line)
    return tuple(lines)


def mark(plan: Plan, choices: Mapping[str, schedule.Choice]) -> Plan:
    """The plan with each in-sync keep of a role held back by a rollout saying so."""
    out: list[Decision] = []
    changed = False
    for d in plan.decisions:
        choice = choices.get(d.role)
        if (choice is not None and choice.take is Take.PREVIOUS and isinstance(d.act, Keep)
                and d.reason is Reason.IN_SYNC):
            why = choice.reason.removeprefix("rollout ")
            d = attrs.evolve(d, reason=Reason.ROLLOUT, why=why)
            changed = True
        out.append(d)
    return attrs.evolve(plan, decisions=tuple(out)) if changed else plan


#: A rehearsal's clock for the schedule only (tests, a dry run of tomorrow's waves):
#: RFC 3339 or unix seconds. Backoffs, bakes of servers and the record keep the real clock.
NOW_VARIABLE = "RECONCILER_ROLLOUT_NOW"


def now(clock) -> float:
    """The schedule's ``now``: ``$RECONCILER_ROLLOUT_NOW`` when set, else the pass's clock."""
    given = os.environ.get(NOW_VARIABLE, "").strip()
    if given:
        try:
            return float(given)
        except ValueError:
            import datetime

            try:
                return datetime.datetime.fromisoformat(given.replace("Z", "+00:00")).timestamp()
            except ValueError:
                pass
    return clock()


def record_rollbacks(store, staged: Staged, *, git_commit: str | None, at: float) -> None:
    """One ``rollback`` event per role this pass rolled back."""
    from reconciler.core import events

    for role, run in staged.rollbacks:
        store.add_event(events.Event(
            role=role, kind=events.EventKind.ROLLED_BACK, reason="rollout",
            detail=f"{(run.failed or '')[:12]} {run.why}: back to {run.runs[:12]};"
                   " not taken again until a new commit",
            ok=False, git_commit=git_commit, at=at))
