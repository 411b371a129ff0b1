"""Cheap facts about the models managed roles use, made with each observation (SHELL).

A pass must not hash gigabytes to decide: ``check(desired, sticky)`` looks
only at what is cheap and certain. A model with a sticky mismatch (the
store remembers one until a full verification passes, BEHAVIOUR §1.1) is
refused; a root directory that has vanished is a detached model store; any
other model is ``unverified`` here and verified for real right before the
spawn that uses it (``act.py``). A Model served from the node's fetch cache
(§1.6) is ``unverified`` until fetched: the fetch rung waits for it.
"""

from __future__ import annotations

import os
from typing import Mapping

from reconciler.core.desired import Desired, program_key
from reconciler.core.observed import ModelCheck, ModelState


def check(desired: Desired, sticky: Mapping[str, str]) -> tuple[ModelCheck, ...]:
    """One check per model a managed role serves or drafts with, by name."""
    fetch = desired.node.fetch
    cached = f"{fetch.cache.rstrip('/')}/models/" if fetch is not None else None
    names = set()
    for role in desired.roles:
        if role.managed:
            names.update(n for n in (role.model, *role.serve.weight_refs) if n)
    checks = []
    for name in sorted(names):
        spec = desired.model(name)
        if spec is None:
            continue
        if cached is not None and spec.fetchable and (spec.root or "").startswith(cached):
            # §1.6 its tree appears when its fetch is done: the fetch rung decides
            checks.append(ModelCheck(name=name, state=ModelState.UNVERIFIED))
        elif sticky.get(name):
            checks.append(ModelCheck(name=name, state=ModelState.MISMATCH, detail=sticky[name]))
        elif spec.root is not None and not os.path.isdir(spec.root):
            state = ModelState.MISMATCH if os.path.exists(spec.root) else ModelState.DETACHED
            detail = ("model store is detached" if state is ModelState.DETACHED
                      else f"model {name}: root {spec.root} is not a directory")
            checks.append(ModelCheck(name=name, state=state, detail=detail))
        else:
            checks.append(ModelCheck(name=name, state=ModelState.UNVERIFIED))
    for program in {p for r in desired.roles if r.managed and (p := desired.program_for(r))}:
        key = program_key(program.name)  # §14 a Program that failed its check before a start
        if sticky.get(key):
            checks.append(ModelCheck(name=key, state=ModelState.MISMATCH, detail=sticky[key]))
    return tuple(sorted(checks, key=lambda c: c.name))
