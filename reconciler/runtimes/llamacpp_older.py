"""Older llama-server spellings → what the pinned llama-server says (PURE): for ``import`` (§1.7).

Command lines live for years; llama-server's flags move. Most lines people post were written
for an older release: ``--no-mmap`` and ``--mlock`` became ``--load-mode``, ``-fa`` took a
value, ``--draft-max`` became ``--spec-draft-n-max``. Validation holds a role to the flag
table of the server the reconciler runs (``runtimes/llamacpp_flags.py``) and says what to
write instead; ``reconcile import`` writes it, so an imported line runs on that server
meaning what it meant. Each rewrite is a ``Rewrite`` naming the old and the new spelling
(``translate`` turns it into a note). A spelling the table still knows is never rewritten.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from reconciler.runtimes.flags import Flag

#: The pinned server's flag table, asked by spelling (``FlagTable.find``).
Find = Callable[[str], "Flag | None"]


class Rewrite(NamedTuple):
    flag: str  # the old spelling
    what: str
    dropped: bool = False

#: Removed flags that take one value, and the flag that took their place.
_RENAMED = {
    "--draft-max": "--spec-draft-n-max", "--draft": "--spec-draft-n-max",
    "--draft-n": "--spec-draft-n-max", "--draft-min": "--spec-draft-n-min",
    "--draft-n-min": "--spec-draft-n-min",
}
#: Flags this server dropped without a successor: the value is dropped with the reason.
_GONE = {
    "-cd": "the draft model's context is the main model's in this llama-server",
    "--ctx-size-draft": "the draft model's context is the main model's in this llama-server",
    "--log-format": "the reconciler keeps the server's output itself (`reconcile logs ROLE`)",
}
_LOAD = ("--no-mmap", "--mmap", "--mlock", "--direct-io", "-dio")


def successor(spelling: str) -> str | None:
    """The flag that took ``spelling``'s place (``--no-mmap`` → ``--load-mode``), for
    refusals that name it (§1.4 per version); None for one dropped without a successor."""
    if spelling in (*_LOAD, "--no-direct-io", "-ndio"):
        return "--load-mode"
    return _RENAMED.get(spelling)


def _unknown_or_removed(find: Find, spelling: str) -> bool:
    flag = find(spelling)
    return flag is None or flag.instead.startswith("removed from this llama-server")


def modernise(words: list[str], find: Find) -> tuple[list[str], list[Rewrite]]:
    """``words`` (a llama-server's arguments) in this llama-server's spellings, and notes."""
    out: list[str] = []
    notes: list[Rewrite] = []
    load: set[str] = set()
    spec_type = _value_of(words, "--spec-type") or ""
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if word in _LOAD and find(word) is None:
            load.add(word)
            i += 1
            continue
        if word in _RENAMED and nxt is not None and _unknown_or_removed(find, word):
            out += [_RENAMED[word], nxt]
            notes.append(_rewritten(word, _RENAMED[word]))
            i += 2
            continue
        if word in _GONE and nxt is not None and _unknown_or_removed(find, word):
            notes.append(Rewrite(word, _GONE[word], dropped=True))
            i += 2
            continue
        if (word == "--spec-ngram-size-n" and nxt is not None and "ngram-mod" in spec_type
                and _unknown_or_removed(find, word)):
            out += ["--spec-ngram-mod-n-match", nxt]
            notes.append(_rewritten(word, "--spec-ngram-mod-n-match"))
            i += 2
            continue
        flag = find(word)
        if (flag is not None and flag.choices and "on" in flag.choices and flag.takes_value
                and (nxt is None or (nxt.startswith("-") and nxt not in flag.choices))):
            out += [word, "on"]  # `-fa` alone, as releases before the value was required
            notes.append(_rewritten(word, f"{word} on"))
            i += 1
            continue
        out.append(word)
        i += 1
    if load:
        mode = _load_mode(load)
        out += ["--load-mode", mode]
        notes.append(_rewritten(" ".join(sorted(load)), f"--load-mode {mode}"))
    return out, notes


def _load_mode(load: set[str]) -> str:
    if load & {"--direct-io", "-dio"}:
        return "dio"
    mmap = "--no-mmap" not in load
    if "--mlock" in load:
        return "mmap+mlock" if mmap else "mlock"
    return "mmap" if mmap else "none"


def _value_of(words: list[str], spelling: str) -> str | None:
    for i, word in enumerate(words[:-1]):
        if word == spelling:
            return words[i + 1]
    return None


def _rewritten(old: str, new: str) -> Rewrite:
    return Rewrite(old, f"an older spelling: written as `{new}` for this llama-server")
