"""Node labels and label selectors with Kubernetes semantics (PURE; BEHAVIOUR §10).

A NodeConfig carries ``metadata.labels`` (string keys and values, spelled as
Kubernetes spells them); a role's ``spec.placement.node_selector`` picks nodes
by them. The semantics are Kubernetes' label selectors (``match_labels`` and
``match_expressions``) with node affinity's ``Gt``/``Lt``:

=============  ===========================================================
``In``         the label is present and its value is one of ``values``
``NotIn``      the label is absent, or its value is none of ``values``
``Exists``     the label is present (``values`` must be empty)
``DoesNotExist``  the label is absent (``values`` must be empty)
``Gt`` / ``Lt``   the label is present, its value reads as an integer, and it
               is greater / less than the one integer in ``values`` (which
               must be a label value too: ``-1`` is not one, as in
               Kubernetes' ``labels.NewRequirement``)
=============  ===========================================================

``match_labels {k: v}`` is ``k In [v]``. Every requirement must hold (AND);
a selector with none matches every node. A label value that is not an
integer never satisfies ``Gt``/``Lt`` (it is not an error: the node simply
does not match), as in Kubernetes.

``key_problem``, ``value_problem`` and ``requirement_problem`` say what is
wrong with a key, a value or an operator's values, for the loader's messages.
"""

from __future__ import annotations

import enum
import re
from typing import Mapping

import attrs

# A qualified name: an optional DNS-subdomain prefix and '/', then a name of
# at most 63 characters, alphanumeric at both ends, '-', '_' and '.' inside.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")  # strconv.ParseInt's decimal form (range checked apart)


class Operator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@attrs.frozen(kw_only=True)
class Requirement:
    """One ``key operator values`` term of a selector."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, value = self.operator, labels.get(self.key)
        if op is Operator.IN:
            return value is not None and value in self.values
        if op is Operator.NOT_IN:
            return value is None or value not in self.values
        if op is Operator.EXISTS:
            return value is not None
        if op is Operator.DOES_NOT_EXIST:
            return value is None
        number = int64(value) if value is not None else None
        bound = int64(self.values[0]) if self.values else None
        if number is None or bound is None:
            return False
        return number > bound if op is Operator.GT else number < bound

    def __str__(self) -> str:
        if self.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} ({', '.join(self.values)})"


@attrs.frozen(kw_only=True)
class Selector:
    """Requirements that must all hold; ``match_labels`` entries are ``In`` terms."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(r.key for r in self.requirements)

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.requirements) or "every node"


def selector(match_labels: Mapping[str, str] | None = None,
             match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()) -> Selector:
    """A selector from its manifest form (already checked by the loader)."""
    terms = [Requirement(key=k, operator=Operator.IN, values=(v,))
             for k, v in sorted((match_labels or {}).items())]
    terms += [Requirement(key=k, operator=Operator(op), values=tuple(values))
              for k, op, values in match_expressions]
    return Selector(requirements=tuple(terms))


def int64(text: str) -> int | None:
    """``text`` as Kubernetes reads an integer (a signed 64-bit decimal), or None."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(1 << 63) <= number < (1 << 63) else None


# ---------------------------------------------------------------- what the loader checks


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return (f"label key {key!r}: the prefix before '/' must be a DNS subdomain "
                "(lower-case letters, digits, '-' and '.', at most 253 characters)")
    if not _NAME.fullmatch(name):
        return (f"label key {key!r}: the name must be 1-63 characters, letters, digits, "
                "'-', '_' or '.', beginning and ending with a letter or digit")
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value, or None (the empty string is a value)."""
    if _VALUE.fullmatch(value):
        return None
    return (f"label value {value!r} must be at most 63 characters, letters, digits, "
            "'-', '_' or '.', beginning and ending with a letter or digit")


def requirement_problem(operator: Operator, values: tuple[str, ...]) -> tuple[int | None, str] | None:
    """What is wrong with ``values`` for ``operator``: (index of the value or None, message)."""
    if operator in (Operator.IN, Operator.NOT_IN):
        if not values:
            return None, f"{operator} needs at least one value"
        for i, value in enumerate(values):
            problem = value_problem(value)
            if problem is not None:
                return i, problem
        return None
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        return (None, f"{operator} takes no values") if values else None
    if len(values) != 1:
        return None, f"{operator} takes exactly one value, an integer"
    problem = value_problem(values[0])
    if problem is not None:  # as Kubernetes: the bound is a label value too (so never negative)
        return 0, f"{operator} compares integers written as label values: {problem}"
    if int64(values[0]) is None:
        return 0, f"{operator} compares integers: {values[0]!r} is not a 64-bit integer"
    return None
