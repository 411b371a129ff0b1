"""§13 the schedule of a rollout: when a node takes a staged change, and which changes wait (PURE).

Every answer is a function of (the Rollout document, the node's name and labels,
``now``, the gate's answers): no state, no clock, no IO, so every node works out
its own turn and ``reconcile fleet --rollout`` shows everyone's, from git alone.

**A node's place** (``place``). Its wave: the first of the rollout's waves whose
selector admits its labels, else the implicit last wave ``rest``. The window
``[start, start + duration]`` is cut into one equal slice per wave, in order;
within its wave's slice a node moves at a fraction from 0 to 1: 0 in a canary
wave (every canary moves when the wave opens), else its
``reconciler.io/rollout-position`` label when that is a decimal from 0 to 1,
else a stable hash of its name (SHA-256, never Python's salted ``hash()``: every
node and every CI job must agree).

**Its turn** (``turn``): paused → hold, everyone where they stand. Else the node
moves once ``now`` has reached its moment and, past the first wave, the gate of
its wave is open. A gate that could not be read, or was not asked (offline),
holds: unknown is never go. Once the window has run out and the gates passed,
every node moves; for fixed gate answers the turn is monotone in ``now``.

**Which changes wait** (``change``): only a change of a role the node runs is
staged: its spec, or a Model or Program document it resolves to (``Version``:
the same name, another document — a new llama.cpp build is the commonest risky
change). A role removed, a role set to ``state: stopped``,
a role that runs nowhere yet, and a revert (to the spec the node runs, or to the
one it ran before) apply at once: stopping a bad change never waits for a wave.
The Rollout document itself is never staged, so a pause holds at once.

``choose`` puts them together for a node's pass: per role, take the new spec or
keep the one it runs, and why; ``gates_to_ask`` says which gates it needs first.

Size: the schedule, which changes wait and the choice per role are one rule read
together (a node's turn only matters for a staged change); apart, each would
restate the others' cases.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
from typing import Mapping, Sequence

import attrs

from reconciler.core.desired import Desired, RoleSpec, WantedState, document_name
from reconciler.core.rollouts import POSITION_LABEL, Rollout, Wave
from reconciler.manifests.rolloutdoc import position_label

frozen = attrs.frozen(kw_only=True)


@frozen
class GateAnswer:
    """What a gate said for one wave: open, closed, or unknown (None: unreadable, not asked)."""

    open: bool | None
    reason: str = ""


#: The answer of a gate nobody asked (``reconcile fleet --rollout`` offline).
NOT_ASKED = GateAnswer(open=None, reason="not asked (offline)")


@frozen
class Place:
    """Where a node stands in a rollout: its wave and the moment it moves."""

    wave: int  # index in ``rollout.all_waves``
    wave_name: str
    fraction: float  # 0 (first) to 1 (last) within the wave's slice
    at: float  # unix seconds: when the node moves, gates allowing
    opens: float  # unix seconds: when its wave opens


class Why(enum.StrEnum):
    MOVES = "moves"
    PAUSED = "paused"
    WINDOW = "window"  # its moment has not come
    GATE = "gate"  # its moment has come, the gate is not open


@frozen
class Turn:
    """Whether a node may take the staged change now, and why not."""

    moves: bool
    why: Why
    place: Place
    reason: str  # for the plan: `wave canary first; this node moves at 14:20Z`


def fraction_of(name: str) -> float:
    """A stable fraction in [0, 1) from a node's name (the same on every machine)."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def wave_of(rollout: Rollout, labels: Mapping[str, str]) -> int:
    """The index in ``all_waves`` of the first wave admitting ``labels`` (``rest`` otherwise)."""
    waves = rollout.all_waves
    for i, wave in enumerate(waves):
        if wave.selector.matches(labels):
            return i
    return len(waves) - 1  # only reached when ``rest`` is there: it has no requirement


def place(rollout: Rollout, node: str, labels: Mapping[str, str]) -> Place:
    waves = rollout.all_waves
    i = wave_of(rollout, labels)
    wave: Wave = waves[i]
    if wave.canary:
        fraction = 0.0
    else:
        given = labels.get(POSITION_LABEL)
        fraction = position_label(given) if given is not None else None
        if fraction is None:
            fraction = fraction_of(node)
    width = rollout.duration / len(waves)
    opens = rollout.start + i * width
    return Place(wave=i, wave_name=wave.name, fraction=fraction,
                 at=min(opens + fraction * width, rollout.end), opens=opens)


def turn(rollout: Rollout, node: str, labels: Mapping[str, str], now: float,
         gates: Mapping[str, GateAnswer]) -> Turn:
    """The node's turn at ``now``; ``gates``: wave name → the gate's answer for that wave."""
    where = place(rollout, node, labels)
    if rollout.paused:
        return Turn(moves=False, why=Why.PAUSED, place=where,
                    reason=f"paused (Rollout {rollout.name})")
    if now < where.at:
        return Turn(moves=False, why=Why.WINDOW, place=where,
                    reason=_waiting(rollout, where, now))
    if where.wave > 0 and rollout.gate is not None:
        answer = gates.get(where.wave_name, NOT_ASKED)
        if answer.open is not True:
            state = "closed" if answer.open is False else "unknown"
            return Turn(moves=False, why=Why.GATE, place=where,
                        reason=f"wave {where.wave_name}: gate {state}: {answer.reason or 'no reason given'}")
    return Turn(moves=True, why=Why.MOVES, place=where,
                reason=f"wave {where.wave_name}, moved at {clock(where.at, now)}")


def _waiting(rollout: Rollout, where: Place, now: float) -> str:
    at = clock(where.at, now)
    if now < rollout.start:
        return f"the rollout starts at {clock(rollout.start, now)}; this node moves at {at}"
    if now < where.opens:
        width = rollout.duration / len(rollout.all_waves)
        moving = rollout.all_waves[min(int((now - rollout.start) // width), where.wave - 1)]
        return f"wave {moving.name} first; this node moves at {at}"
    return f"wave {where.wave_name} is moving; this node moves at {at}"


def clock(when: float, now: float) -> str:
    """``14:20Z`` within a day of ``now``, else ``2026-12-03 14:20Z`` (seconds when not 0)."""
    moment = datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    shown = moment.strftime("%H:%M:%S" if moment.second or moment.microsecond else "%H:%M")
    if abs(when - now) >= 86400:
        shown = moment.strftime("%Y-%m-%d ") + shown
    return shown + "Z"


# ------------------------------------------------------------ which changes wait


class Kind(enum.StrEnum):
    SAME = "same"  # nothing changes
    AT_ONCE = "at-once"  # applies now, whatever the rollout says
    STAGED = "staged"  # waits for the node's turn


@frozen
class Change:
    kind: Kind
    reason: str


@frozen
class Version:
    """What a role runs (§13): its spec and the Model and Program documents it resolves to,
    as this node has them (a Model's root included). Another document under the same name
    (a new llama.cpp build, new weights) is a change of the role like a spec change."""

    spec: RoleSpec
    #: (kind, name, document): ``model`` for spec.model and every weight it loads besides,
    #: ``program`` for the Program it runs (None for an absolute path, or a name undeclared).
    documents: tuple[tuple[str, str, object], ...] = ()


def version_of(desired: Desired, spec: RoleSpec) -> Version:
    """``spec`` with the documents ``desired`` resolves it to (its node's serve_programs)."""
    docs: list[tuple[str, str, object]] = [
        ("model", document_name(n), desired.model(n))
        for n in dict.fromkeys((spec.model, *spec.serve.weight_refs)) if n]
    program = spec.program or desired.node.serve_program(spec.runtime)
    if program:
        docs.append(("program", document_name(program), desired.program_for(spec)))
    return Version(spec=spec, documents=tuple(docs))


Runs = RoleSpec | Version


def _spec(x: Runs | None) -> RoleSpec | None:
    return x.spec if isinstance(x, Version) else x


def change(runs: Runs | None, new: Runs | None, *, before: Runs | None = None) -> Change:
    """Whether the change from what a node runs to what the manifests now say waits for its turn.

    ``runs``: the role as the node runs it (None: not on this node);
    ``new``: as the manifests now say (None: removed or placed elsewhere);
    ``before``: what the node ran before ``runs`` (a kept generation), if any.
    Each is a ``RoleSpec`` or a ``Version`` (the spec with its Model and Program documents).
    """
    if new == runs:
        return Change(kind=Kind.SAME, reason="unchanged")
    was, now = _spec(runs), _spec(new)
    if now is None:
        return Change(kind=Kind.AT_ONCE, reason="role removed")
    if now.state is WantedState.STOPPED:
        return Change(kind=Kind.AT_ONCE, reason="state: stopped")
    if was is None:
        return Change(kind=Kind.AT_ONCE, reason="new on this node: nothing runs to keep")
    if was.state is WantedState.STOPPED:
        return Change(kind=Kind.AT_ONCE, reason="not running: nothing runs to keep")
    if before is not None and new == before:
        return Change(kind=Kind.AT_ONCE, reason="a revert to what this node ran before")
    return Change(kind=Kind.STAGED, reason=f"changes {', '.join(changed_fields(runs, new))}")


def changed_fields(a: Runs, b: Runs) -> list[str]:
    """The RoleSpec fields that differ (``ref``, where it was written, is not one), then
    each Model or Program document that differs under its name (``Program llama``)."""
    sa, sb = _spec(a), _spec(b)
    out = [f.name for f in attrs.fields(RoleSpec)
           if f.eq and getattr(sa, f.name) != getattr(sb, f.name)]
    if isinstance(a, Version) and isinstance(b, Version):
        docs = dict(((kind, name), doc) for kind, name, doc in a.documents)
        out += [f"{kind.capitalize()} {name}" for kind, name, doc in b.documents
                if (kind, name) in docs and docs[kind, name] != doc]
    return out or ["the spec"]


# ------------------------------------------------------------ a node's pass


class Take(enum.StrEnum):
    NEW = "new"  # the spec the manifests say now
    PREVIOUS = "previous"  # the spec the node runs (the previous revision's)


@frozen
class Choice:
    role: str
    take: Take
    reason: str  # `rollout upgrade: wave canary first; this node moves at 14:20Z`


def rollout_for(rollouts: Sequence[Rollout], role: str) -> Rollout | None:
    """The rollout staging ``role`` (the loader allows at most one)."""
    return next((r for r in rollouts if r.covers(role)), None)


def gates_to_ask(runs: Mapping[str, Runs], new: Mapping[str, Runs], *,
                 rollouts: Sequence[Rollout], node: str, labels: Mapping[str, str], now: float,
                 before: Mapping[str, Runs] | None = None) -> tuple[tuple[str, str], ...]:
    """The (rollout, wave) gates ``choose`` needs answered now: only where a role's change is
    staged, the node's moment has come and its wave has a gate (a pass asks nothing else)."""
    earlier = before or {}
    wanted: set[tuple[str, str]] = set()
    for role in set(runs) | set(new):
        rollout = rollout_for(rollouts, role)
        if rollout is None or change(runs.get(role), new.get(role),
                                     before=earlier.get(role)).kind is not Kind.STAGED:
            continue
        step = turn(rollout, node, labels, now, {})
        if step.why is Why.GATE:
            wanted.add((rollout.name, step.place.wave_name))
    return tuple(sorted(wanted))


def choose(runs: Mapping[str, Runs], new: Mapping[str, Runs], *,
           rollouts: Sequence[Rollout], node: str, labels: Mapping[str, str], now: float,
           gates: Mapping[tuple[str, str], GateAnswer],
           before: Mapping[str, Runs] | None = None) -> dict[str, Choice]:
    """Per role of ``runs`` or ``new``: take the new spec, or keep the one the node runs.

    ``runs``: role → spec (or ``Version``) the node runs now (the revision it last applied);
    ``new``: role → spec (or ``Version``) of the manifests now (HEAD); ``rollouts``: HEAD's Rollout
    documents (never the staged revision's: a pause holds at once); ``gates``:
    (rollout, wave) → the gate's answer; ``before``: role → the spec the node ran
    before ``runs`` (its kept generation), for reverts.
    """
    out: dict[str, Choice] = {}
    earlier = before or {}
    for role in sorted(set(runs) | set(new)):
        what = change(runs.get(role), new.get(role), before=earlier.get(role))
        rollout = rollout_for(rollouts, role)
        if what.kind is not Kind.STAGED or rollout is None:
            reason = what.reason if rollout is not None or what.kind is not Kind.STAGED \
                else "no rollout stages it"
            out[role] = Choice(role=role, take=Take.NEW, reason=reason)
            continue
        step = turn(rollout, node, labels, now,
                    {w: a for (r, w), a in gates.items() if r == rollout.name})
        out[role] = Choice(role=role, take=Take.NEW if step.moves else Take.PREVIOUS,
                           reason=f"rollout {rollout.name}: {step.reason}")
    return out
