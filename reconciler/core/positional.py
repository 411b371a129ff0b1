"""Makers by position of frozen values (PURE): the planner's way to build many of them fast.

attrs' own ``__init__`` of a frozen class stores each field through
``object.__setattr__``, a call per field: a 15-field ``Decision`` cost ~24 K
instructions, ~20 % of a role's whole pass (``bench/bench_plan_devices.py``).
``by_position(cls)`` gives a maker that takes the fields by position (or keyword), stores
them into a twin class of the same slots as a plain class's ``__init__`` does
(~6 K for a ``Decision``), then makes the object the ``cls`` it is: that
class's value in every way (equal, hashed, frozen, ``attrs.evolve``). CPython
lets an object change class only between classes of one layout, and refuses it
for slotted classes with a weakref slot: the classes built this way have none
(``weakref_slot=False``). Where a Python refuses the switch anyway, the maker
is the keyword constructor (``TWINS`` says which). Tests keep each maker's values
equal to the constructor's (``tests/plan/test_payloads.py``).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import attrs

T = TypeVar("T")


def _twin(cls: type, derived: dict[str, str]) -> type:
    """A plain class of ``cls``'s slots whose ``__init__`` stores the fields and becomes a ``cls``."""
    fields = attrs.fields(cls)
    given = [a for a in fields if a.init]
    assert set(derived) == {a.name for a in fields if not a.init}, (cls, derived)
    assert all(a.validator is None and a.converter is None and a.alias == a.name
               and not isinstance(a.default, attrs.Factory) for a in given), cls
    assert not hasattr(cls, "__attrs_pre_init__") and not hasattr(cls, "__attrs_post_init__"), cls
    scope: dict[str, Any] = {"cls": cls}
    params = []
    for a in given:  # a plain default as attrs' own __init__ has it
        if a.default is attrs.NOTHING:
            params.append(a.name)
        else:
            scope[f"_default_{a.name}"] = a.default
            params.append(f"{a.name}=_default_{a.name}")
    code = (f"def __init__(self, {', '.join(params)}):\n"
            + "".join(f"    self.{a.name} = {a.name}\n" for a in given)
            + "".join(f"    self.{name} = {value}\n" for name, value in derived.items())
            + "    self.__class__ = cls\n")
    exec(code, scope)  # (how attrs writes its own __init__)
    return type(f"_{cls.__name__}ByPosition", (),
                {"__slots__": cls.__slots__, "__init__": scope["__init__"]})


def _switches() -> bool:
    """Whether this Python lets an object become another class of the same slots."""
    @attrs.frozen(weakref_slot=False)
    class Probe:
        a: int

    try:
        _twin(Probe, {})(1)
    except TypeError:
        return False
    return True


#: Whether ``by_position`` gives plain-store makers here (else keyword constructors).
TWINS = _switches()


def by_position(cls: type[T], **derived: str) -> Callable[..., T]:
    """``cls(**fields)``, its fields given by position (in the fields' order) or by keyword,
    plain defaults as ``cls``'s (no validators, converters or factories: asserted).

    ``derived``: each field that is not an init argument, as an expression of the others
    (``verb="act.verb"``), as its default would work it out."""
    if not TWINS:
        names = [a.name for a in attrs.fields(cls) if a.init]
        return lambda *values, **named: cls(**dict(zip(names, values)), **named)
    return _twin(cls, derived)
