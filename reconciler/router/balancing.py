"""Which instance of a group a request goes to (PURE; BEHAVIOUR §9.1).

A role with ``replicas: N`` is N instances (``chat``, ``chat/1`` …) that the
router sees as one group under one name. For each request the proxy hands
``choose`` the group's instances as they are at that moment, and gets one
back, or None: every usable instance is full, and the request queues.

* **Usable**: ready (its route ``READY``, its gate open, not taken out of
  rotation after a failure). An instance that starts, stops (drains) or
  failed is never chosen.
* **Capacity**: the requests an instance takes at once, the smaller of its
  slots and its ``max_concurrency``. Slots are llama-server's
  ``total_slots`` (``/props``, learned by the proxy), 1 for mlx-lm, and 1 for
  an instance whose slots are not learned yet. A group of one instance is
  bounded by ``max_concurrency`` alone, as a role always was: its server
  queues what its slots cannot take, and a router queue would only add a
  hop; with two or more, a request the router holds goes to whichever
  instance frees first, which a server's own queue cannot do.
* **Choice**: among the instances with room, the least loaded, load being in
  flight over capacity (compared exactly, as fractions); never a full one
  while another has room. Ties are broken by ``turn`` (the proxy counts its
  choices): the ``turn``-th of the tied, in replica order, so a quiet group's
  requests go round its instances instead of piling on the first.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence


class Instance(NamedTuple):
    """One instance of a group, as the proxy sees it when a request arrives (a tuple: one
    is made per instance per request, and attrs' frozen ``__init__`` costs 2 µs each)."""

    name: str
    ready: bool = True  # READY, open, in rotation
    in_flight: int = 0
    slots: int | None = None  # None: not learned yet (1)
    max_concurrency: int | None = None  # None: no bound of the role's


def capacity(instance: Instance, alone: bool = False) -> int | None:
    """The requests ``instance`` takes at once (None: no bound; see the module)."""
    if alone:
        return instance.max_concurrency
    slots = max(instance.slots or 1, 1)
    if instance.max_concurrency is None:
        return slots
    return max(min(slots, instance.max_concurrency), 1)


def has_room(instance: Instance, alone: bool = False) -> bool:
    bound = capacity(instance, alone)
    return bound is None or instance.in_flight < bound


def choose(instances: Sequence[Instance], turn: int = 0) -> Instance | None:
    """The instance the next request goes to; None: none usable has room (see the module)."""
    alone = len(instances) == 1
    best: list[Instance] = []
    best_load: tuple[int, int] = (0, 1)
    for instance in instances:
        if not instance.ready or not has_room(instance, alone):
            continue
        load = (instance.in_flight, capacity(instance, alone) or 1)
        if not best or load[0] * best_load[1] < best_load[0] * load[1]:
            best, best_load = [instance], load
        elif load[0] * best_load[1] == best_load[0] * load[1]:
            best.append(instance)
    if not best:
        return None
    return best[turn % len(best)]


def full(instances: Sequence[Instance]) -> bool:
    """Some instance is usable, and every usable one is full: a request queues."""
    alone = len(instances) == 1
    usable = [i for i in instances if i.ready]
    return bool(usable) and not any(has_room(i, alone) for i in usable)


def slots_of(props: object) -> int | None:
    """``total_slots`` from llama-server's ``GET /props`` answer; None when it has none."""
    if not isinstance(props, Mapping):
        return None
    slots = props.get("total_slots")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        return None
    return min(slots, 4096)
