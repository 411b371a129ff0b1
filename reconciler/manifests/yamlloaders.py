"""PyYAML's loaders for ``yamlsafe``: the Python one with a depth limit, and libyaml's (PURE).

``Loader`` is PyYAML's SafeLoader, all in Python, refusing nesting deeper than
``MAX_DEPTH`` as it composes (before Python's stack would); every message
about broken YAML is its own. ``FastLoader`` is libyaml's parser and composer
in C, for the common case of a clean file (``yamlsafe.parse`` says when).
"""

from __future__ import annotations

import yaml
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

MAX_DEPTH = 64

try:  # libyaml: the scanner, parser and composer in C (FastLoader)
    from yaml.cyaml import CParser as CParser_
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CParser_ = None


class _Depth:
    """A composer that refuses deep nesting before Python's stack does."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node:  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[attr-defined]
                raise yaml.MarkedYAMLError(
                    problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=mark)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1


class Loader(_Depth, yaml.SafeLoader):
    """PyYAML's SafeLoader (all in Python) with the depth limit."""


if CParser_ is not None:
    class FastLoader(Resolver, CParser_):  # type: ignore[misc, valid-type]
        """libyaml's parser and composer (all in C), with PyYAML's tag resolution.

        A large fleet repository is thousands of documents: PyYAML's scanner,
        parser and composer in Python were most of the time YAML took. The C
        composer builds the same nodes with the same marks, but knows nothing of
        ``MAX_DEPTH`` (libyaml stops at 1,000 levels): ``yamlsafe._documents``
        gives up on a file as soon as its builder finds anything to report, or
        goes as deep as ``Loader``'s limit, and ``yamlsafe.parse`` reads it
        again with ``Loader``: every message, about broken YAML or not, is the
        one the Python path gives.
        """

        def __init__(self, stream: str) -> None:
            CParser_.__init__(self, stream)
            Resolver.__init__(self)

        def resolve(self, kind: type, value: str | None, implicit: tuple[bool, bool]) -> str:
            """``Resolver.resolve`` for a scalar, its table of patterns built once.

            libyaml's composer asks for every scalar; PyYAML's method joins two
            lists each time. Same patterns in the same order, same answer.
            """
            if kind is ScalarNode and _IMPLICIT is not None:
                if implicit[0]:
                    for tag, regexp in _IMPLICIT.get(value[:1], _WILDCARD):  # type: ignore[index]
                        if regexp.match(value):
                            return tag
                return self.DEFAULT_SCALAR_TAG
            return super().resolve(kind, value, implicit)

    #: First character → (tag, pattern) as ``Resolver.resolve`` tries them (None: path
    #: resolvers are set, and the table would not be the whole answer).
    _WILDCARD = tuple(Resolver.yaml_implicit_resolvers.get(None, []))
    _IMPLICIT = None if Resolver.yaml_path_resolvers else {
        first: tuple(found) + _WILDCARD
        for first, found in Resolver.yaml_implicit_resolvers.items() if first is not None}
else:  # pragma: no cover
    FastLoader = None
