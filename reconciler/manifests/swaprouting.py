"""Which llama-swap models may run together → each role's ``excludes`` (PURE).

BEHAVIOUR §1.7. llama-swap decides it with one of two routers, read where llama-swap reads
them: ``routing.router.settings.groups`` or ``.matrix`` (``routing.router.use``: ``group``,
the default, or ``matrix``), or the older top-level ``groups`` / ``matrix``. A config with
both places, or with both groups and a matrix at the top, is refused, as llama-swap refuses it.

* **groups**: ``swap: true`` members exclude each other; a start in an ``exclusive`` group
  stops every model of another group unless that group is ``persistent``; models in no group
  form llama-swap's default group (``swap`` and ``exclusive``): with no groups, one model at a
  time.
* **matrix**: ``sets`` of expressions (``a & b``, ``a | b``, ``(…)``, ``+set``; ``vars``
  name models) list the combinations that may run together, and every part of one; a model
  in no set runs alone. Two models exclude each other when no combination holds both.

``excludes`` are pairs that hold both ways; what they cannot say is a ``Note`` (not kept) on
each model concerned, so the import never counts that model whole:

* a pair one group's start stops and the other's does not (llama-swap keeps that gotcha: a
  model of a group that is not exclusive starts beside an exclusive group's running model):
  excludes keep them apart both ways;
* three or more models the matrix lets run together only in pairs: excludes let them all run;
* a matrix too large to check here (over ``LIMIT`` combinations from one set).

Size: the two routers come to one answer (the pairs that may run together, and the notes on
what pairs cannot say), and the matrix's small expression language is parsed here only.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import attrs

from reconciler.manifests.translate import Note

#: Combinations one matrix set may expand to before the three-way check gives up.
LIMIT = 4096
_TOKEN = re.compile(r"\s*(?:([&|()])|\+([\w.-]+)|([\w.-]+))")
_DEFAULT_GROUP = {"swap": True, "exclusive": True, "persistent": False}


@attrs.frozen(kw_only=True)
class Routing:
    excludes: dict[str, tuple[str, ...]]  # model id → its "role:NAME" entries
    notes: dict[str, tuple[Note, ...]]  # model id → what its excludes cannot say
    config_notes: tuple[Note, ...]  # about the routing as a whole (not carried)


def read(config: Mapping[str, Any], ids: list[str], roles: Mapping[str, str]) -> Routing:
    """The excludes of each of ``ids`` (``roles``: model id → role name); ValueError for a
    routing llama-swap itself refuses."""
    groups, matrix = _source(config)
    config_notes: list[Note] = []
    scheduler = _get(config, "routing", "scheduler", "settings", "fifo", "priority")
    if scheduler:
        config_notes.append(Note(flag="routing.scheduler", kept=False, what="request "
                                 "priorities are not carried: the router does not queue by model"))
    if matrix is not None:
        pairs, notes = _matrix(matrix, ids, config_notes)
    else:
        pairs, notes = _groups(groups, ids, config_notes)
    excludes = {a: tuple(sorted(f"role:{roles[b]}" for b in ids if b != a
                                and frozenset((a, b)) not in pairs)) for a in ids}
    return Routing(excludes=excludes, notes={m: tuple(n) for m, n in notes.items()},
                   config_notes=tuple(config_notes))


def _source(config: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(groups, matrix)`` as llama-swap picks them (one of them None or empty)."""
    top_groups, top_matrix = config.get("groups"), config.get("matrix")
    router = _get(config, "routing", "router") or {}
    settings = router.get("settings") if isinstance(router.get("settings"), Mapping) else {}
    use = router.get("use")
    if top_matrix is not None or top_groups:
        if use or settings.get("matrix") is not None or settings.get("groups"):
            raise ValueError("the config has both the top-level `groups`/`matrix` and "
                             "`routing.router`; llama-swap refuses it too: keep one")
        if top_matrix is not None and top_groups:
            raise ValueError("the config has both `groups` and `matrix`; llama-swap "
                             "refuses it too: keep one")
        return top_groups, top_matrix
    if use in (None, "", "group"):
        return settings.get("groups"), None
    if use == "matrix":
        if settings.get("matrix") is None:
            raise ValueError("routing.router.use is `matrix` but routing.router.settings has "
                             "no matrix (llama-swap refuses it too)")
        return None, settings["matrix"]
    raise ValueError(f"routing.router.use: {use!r} is no router of llama-swap (group, matrix)")


def _get(raw: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(raw, Mapping):
            return None
        raw = raw.get(key)
    return raw


# ---------------------------------------------------------------- groups


def _groups(groups: Any, ids: list[str], config_notes: list[Note]
            ) -> tuple[set[frozenset[str]], dict[str, list[Note]]]:
    """The pairs that may run together, and the notes on pairs llama-swap runs together in
    one start order only."""
    member_of: dict[str, tuple[str, Mapping]] = {}
    if isinstance(groups, Mapping):
        for name, group in groups.items():
            group = group if isinstance(group, Mapping) else {}
            for member in group.get("members") or ():
                if str(member) in ids:
                    member_of[str(member)] = (str(name), {**_DEFAULT_GROUP, **group})
                else:
                    config_notes.append(Note(flag=f"groups.{name}", kept=False,
                                             what=f"member {member!r} is not a model of the config"))
    default = ("", _DEFAULT_GROUP)
    together: set[frozenset[str]] = set()
    one_way: dict[str, list[str]] = {}
    for i, a in enumerate(ids):
        group_a, conf_a = member_of.get(a, default)
        for b in ids[i + 1:]:
            group_b, conf_b = member_of.get(b, default)
            if group_a == group_b:
                if not conf_a.get("swap"):
                    together.add(frozenset((a, b)))
                continue
            a_stops_b = bool(conf_a.get("exclusive")) and not conf_b.get("persistent")
            b_stops_a = bool(conf_b.get("exclusive")) and not conf_a.get("persistent")
            if not a_stops_b and not b_stops_a:
                together.add(frozenset((a, b)))
            elif a_stops_b != b_stops_a:
                one_way.setdefault(a, []).append(b)
                one_way.setdefault(b, []).append(a)
    notes = {m: [Note(flag="groups", kept=False, what=(
        f"llama-swap runs it beside {', '.join(others)} in one start order only (a model of a "
        "group that is not exclusive starts beside a running exclusive group; a persistent "
        "group is never stopped), and stops one of them in the other order; excludes hold "
        "both ways: here they never run together"))] for m, others in one_way.items()}
    return together, notes


# ---------------------------------------------------------------- the matrix


def _matrix(matrix: Any, ids: list[str], config_notes: list[Note]
            ) -> tuple[set[frozenset[str]], dict[str, list[Note]]]:
    """The pairs some combination of the matrix holds, and notes on what pairs cannot say."""
    if not isinstance(matrix, Mapping) or not isinstance(matrix.get("sets"), Mapping) \
            or not matrix["sets"]:
        raise ValueError("matrix: no `sets` (llama-swap refuses a matrix without one)")
    names = {str(k): str(v) for k, v in (matrix.get("vars") or {}).items()}
    if matrix.get("evict_costs"):
        config_notes.append(Note(flag="matrix.evict_costs", kept=False, what=(
                                 "which running model is stopped to make room is the "
                                 "reconciler's own choice, not these costs")))
    sets = {str(k): str(v) for k, v in matrix["sets"].items()}
    unknown: set[str] = set()
    parsed = {name: _parse(text, name, names, ids, unknown) for name, text in sets.items()}
    if unknown:
        config_notes.append(Note(flag="matrix", kept=False, what=(
            f"{', '.join(sorted(unknown))}: no model of the config (llama-swap refuses such a "
            "matrix): left out of its combinations")))
    pairs: set[frozenset[str]] = set()
    combos: set[frozenset[str]] = set()
    too_large = False
    for name in sets:
        _, set_pairs = _pairs(parsed, name, [])
        pairs |= set_pairs
        try:
            combos |= _expand(parsed, name, [])
        except _TooLarge:
            too_large = True
    notes: dict[str, list[Note]] = {}
    if too_large:
        for m in ids:
            notes.setdefault(m, []).append(Note(flag="matrix", kept=False, what=(
                f"a set expands to over {LIMIT} combinations: excludes keep its pairs apart, "
                "but whether three or more may run together was not checked")))
        return pairs, notes
    for clique in _cliques(ids, pairs):
        if len(clique) > 2 and not any(clique <= c for c in combos):
            for m in sorted(clique):
                others = ", ".join(sorted(clique - {m}))
                notes.setdefault(m, []).append(Note(flag="matrix", kept=False, what=(
                    f"the matrix runs it beside {others} in smaller combinations only, never "
                    f"all {len(clique)} together; excludes are pairs: here all may run at once")))
    return pairs, notes


class _TooLarge(Exception):
    pass


def _parse(text: str, name: str, names: Mapping[str, str], ids: list[str],
           unknown: set[str]) -> Any:
    """One set's expression as a tree: ``("or"|"and", [children])``, ``("ref", set)``,
    ``("model", id)``, ``("none", name)`` for a name that is no model (added to
    ``unknown``); ValueError where llama-swap cannot read it."""
    tokens: list[tuple[str, str]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"matrix.sets.{name}: unexpected {text[pos:].strip()[:1]!r} in "
                             f"{text!r}")
        op, ref, ident = m.groups()
        tokens.append(("op", op) if op else ("ref", ref) if ref else ("id", ident))
        pos = m.end()
    tokens.append(("end", ""))
    at = [0]

    def expr() -> Any:
        children = [conj()]
        while tokens[at[0]] == ("op", "|"):
            at[0] += 1
            children.append(conj())
        return ("or", children) if len(children) > 1 else children[0]

    def conj() -> Any:
        children = [atom()]
        while tokens[at[0]] == ("op", "&"):
            at[0] += 1
            children.append(atom())
        return ("and", children) if len(children) > 1 else children[0]

    def atom() -> Any:
        kind, value = tokens[at[0]]
        at[0] += 1
        if kind == "id":
            model = names.get(value, value)
            if model not in ids:
                unknown.add(model)
                return ("none", model)
            return ("model", model)
        if kind == "ref":
            return ("ref", value)
        if (kind, value) == ("op", "("):
            inner = expr()
            if tokens[at[0]] != ("op", ")"):
                raise ValueError(f"matrix.sets.{name}: a `(` without its `)` in {text!r}")
            at[0] += 1
            return inner
        raise ValueError(f"matrix.sets.{name}: {value or 'the end'!r} where a model was "
                         f"expected in {text!r}")

    if not text:
        raise ValueError(f"matrix.sets.{name}: empty")
    tree = expr()
    if tokens[at[0]][0] != "end":
        raise ValueError(f"matrix.sets.{name}: {tokens[at[0]][1]!r} after the expression")
    return tree


def _deref(parsed: Mapping[str, Any], name: str, stack: list[str]) -> Any:
    if name not in parsed:
        raise ValueError(f"matrix.sets: +{name} names no set")
    if name in stack:
        raise ValueError(f"matrix.sets: {' → '.join([*stack, name])} is a cycle")
    return parsed[name]


def _pairs(parsed: Mapping[str, Any], name: str, stack: list[str]
           ) -> tuple[frozenset[str], set[frozenset[str]]]:
    """The models of a set's combinations and every pair some combination holds, without
    expanding them (an AND pairs each model of one part with each model of another)."""
    def walk(node: Any, stack: list[str]) -> tuple[frozenset[str], set[frozenset[str]]]:
        kind, value = node
        if kind in ("model", "none"):
            return frozenset((value,) if kind == "model" else ()), set()
        if kind == "ref":
            return walk(_deref(parsed, value, stack), [*stack, value])
        parts = [walk(child, stack) for child in value]
        models = frozenset().union(*(p[0] for p in parts))
        pairs = set().union(*(p[1] for p in parts))
        if kind == "and":
            for i, (left, _) in enumerate(parts):
                for right, _ in parts[i + 1:]:
                    pairs |= {frozenset((a, b)) for a in left for b in right if a != b}
        return models, pairs

    return walk(_deref(parsed, name, stack), [*stack, name])


def _expand(parsed: Mapping[str, Any], name: str, stack: list[str]) -> set[frozenset[str]]:
    """Every combination a set names; _TooLarge past ``LIMIT``."""
    def walk(node: Any, stack: list[str]) -> set[frozenset[str]]:
        kind, value = node
        if kind in ("model", "none"):
            return {frozenset((value,) if kind == "model" else ())}
        if kind == "ref":
            return walk(_deref(parsed, value, stack), [*stack, value])
        parts = [walk(child, stack) for child in value]
        if kind == "or":
            out = set().union(*parts)
        else:
            out = {frozenset()}
            for part in parts:
                out = {a | b for a in out for b in part}
                if len(out) > LIMIT:
                    raise _TooLarge
        if len(out) > LIMIT:
            raise _TooLarge
        return out

    return walk(_deref(parsed, name, stack), [*stack, name])


def _cliques(ids: list[str], pairs: set[frozenset[str]]) -> list[frozenset[str]]:
    """The largest groups of models of which every two may run together (Bron–Kerbosch)."""
    near = {m: {n for n in ids if n != m and frozenset((m, n)) in pairs} for m in ids}
    out: list[frozenset[str]] = []

    def grow(chosen: set[str], maybe: set[str], done: set[str]) -> None:
        if not maybe and not done:
            out.append(frozenset(chosen))
            return
        pivot = max(maybe | done, key=lambda m: len(near[m] & maybe))
        for m in sorted(maybe - near[pivot]):
            grow(chosen | {m}, maybe & near[m], done & near[m])
            maybe = maybe - {m}
            done = done | {m}

    grow(set(), set(ids), set())
    return out
