"""§12 instances: a role with ``replicas: N`` as N instances, and their names (PURE).

Instance 0 keeps the role's name; instance i ≥ 1 is ``group/i`` on ``serve.port + i``.
The planner, the manifest checks and the status views read names back with ``group_of``
and ``replica_of`` (``RoleSpec.group`` and ``.replica`` too: ``desired.py`` imports this
module, so ``instances`` takes any spec with ``name``, ``replicas`` and ``serve``).
"""

from __future__ import annotations

from typing import TypeVar

import attrs

_Spec = TypeVar("_Spec")  # a core/desired.RoleSpec


def instance_name(group: str, replica: int) -> str:
    """§12 instance 0 keeps the role's name; instance i ≥ 1 is ``group/i``."""
    return group if replica == 0 else f"{group}/{replica}"


def group_of(name: str) -> str:
    """The group an instance name belongs to (``chat/2`` → ``chat``; a role's name has no ``/``)."""
    return name.split("/", 1)[0]


def replica_of(name: str) -> int:
    """The index an instance name carries (``chat/2`` → 2, ``chat`` → 0)."""
    _, _, tail = name.partition("/")
    return int(tail) if tail.isdigit() else 0


def instances(spec: _Spec) -> tuple[_Spec, ...]:
    """§12 a role with ``replicas: N`` as its N instance specs (itself when N is 1).

    Instance i listens on ``serve.port + i``; everything else (placement, memory,
    restart policy, generation inputs) is the role's, per instance.
    """
    if spec.replicas <= 1:
        return (spec,)
    out = [spec]
    for i in range(1, spec.replicas):
        out.append(attrs.evolve(spec, name=instance_name(spec.name, i),
                                serve=attrs.evolve(spec.serve, port=spec.serve.port + i)))
    return tuple(out)
