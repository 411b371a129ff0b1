"""YAML bytes → plain documents with a line for every JSON path (PURE).

PyYAML is lenient where manifests must not be: it keeps the last of two
duplicate keys, expands aliases without limit, and reads ``on:`` as ``True``.
This module has PyYAML compose the YAML node graph (libyaml's composer in C
where the file is clean, ``_FastLoader``; nodes carry ``start_mark``) and
builds plain values (dict, list, str, int, float, bool, None) from it,
refusing:

* bytes that are not UTF-8, and files over ``MAX_FILE_BYTES``;
* malformed YAML (reported at the line PyYAML points at);
* duplicate keys, non-string keys, merge keys (``<<``), unusual tags;
* documents expanding to more than ``MAX_NODES`` nodes (alias bombs) or
  nested deeper than ``MAX_DEPTH``.

Every value's line is remembered under its JSON path, so a problem found
later (by the schema or a cross-document check) can name ``FILE:LINE``.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs
import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconciler.core.errors import Problem, json_path
from reconciler.manifests.yamlloaders import MAX_DEPTH, FastLoader as _FastLoader, Loader as _Loader

MAX_FILE_BYTES = 1 << 20  # 1 MiB
MAX_NODES = 10_000  # per document, counting every alias expansion

Path = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_TAG}{t}" for t in ("str", "null", "bool", "int", "float", "timestamp")}
_STR, _TIMESTAMP, _NULL, _BOOL, _INT = (f"{_TAG}{t}" for t in ("str", "timestamp", "null", "bool", "int"))
_MAP, _SEQ, _MERGE = f"{_TAG}map", f"{_TAG}seq", f"{_TAG}merge"


@attrs.frozen(kw_only=True, eq=False)
class Document:
    """One YAML document of one file, as plain data plus a line map."""

    file: str
    line: int  # the line of the document's root node (1-based)
    value: object
    lines: Mapping[Path, int]
    broken: bool = False  # YAML-level problems were found: skip schema checks

    def line_of(self, path: Iterable[str | int]) -> int:
        """The line of ``path``, or of its nearest ancestor that exists.

        A missing key is thus reported at the mapping that lacks it.
        """
        parts = tuple(path)
        while parts:
            if parts in self.lines:
                return self.lines[parts]
            parts = parts[:-1]
        return self.line

    def problem(self, path: Iterable[str | int], message: str) -> Problem:
        parts = tuple(path)
        return Problem(file=self.file, line=self.line_of(parts), path=json_path(parts),
                       message=message)


class _Abort(Exception):
    """Stop building this document: it is too big or too deep."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _GiveUp(yaml.YAMLError):
    """``_FastLoader``'s file has something to report: ``_Loader`` tells it."""


#: Characters PyYAML's reader refuses: such a file takes the Python path for its message.
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE


def parse(file: str, data: bytes) -> tuple[list[Document], list[Problem]]:
    """Every document of one file, and every problem found on the way."""
    if len(data) > MAX_FILE_BYTES:
        return [], [Problem(file=file, line=0, message=f"file is larger than 1 MiB "
                            f"({len(data)} bytes); manifests are small")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        return [], [Problem(file=file, line=line,
                            message=f"not valid UTF-8 (byte 0x{data[err.start]:02x} "
                                    f"at offset {err.start})")]
    text = text.removeprefix("\ufeff")
    if _FastLoader is not None and not _NON_PRINTABLE.search(text):
        try:
            return _documents(file, text, _FastLoader)
        except yaml.YAMLError:
            pass  # told again below, in PyYAML's words
    return _documents(file, text, _Loader)


def _documents(file: str, text: str, make) -> tuple[list[Document], list[Problem]]:
    """Compose and build every document; YAML errors end the file as a problem
    (``_FastLoader`` lets them through to be told again by ``_Loader``)."""
    fast = make is not _Loader
    docs: list[Document] = []
    problems: list[Problem] = []
    loader = None
    try:
        loader = make(text)
        while loader.check_node():
            node = loader.get_node()
            if node is None or _is_empty(node):
                continue  # a stray `---` or a file of comments
            builder = _Builder(file, MAX_DEPTH - 1 if fast else MAX_DEPTH)
            try:
                value = builder.build(node, (), 0)
            except _Abort as stop:
                if fast:
                    raise _GiveUp(stop.message) from None
                problems.append(Problem(file=file, line=node.start_mark.line + 1,
                                        message=stop.message))
                continue
            if fast and builder.problems:
                raise _GiveUp("told by _Loader")
            problems.extend(builder.problems)
            docs.append(Document(file=file, line=node.start_mark.line + 1, value=value,
                                 lines=builder.lines, broken=bool(builder.problems)))
    except yaml.MarkedYAMLError as err:
        if fast:
            raise
        problems.append(_yaml_problem(file, err))
    except yaml.reader.ReaderError as err:
        if fast:
            raise
        line = text[: err.position].count("\n") + 1
        problems.append(Problem(file=file, line=line, message=f"invalid YAML: character "
                                f"#x{err.character:04x} is not allowed"))
    except yaml.YAMLError as err:  # pragma: no cover - every PyYAML error is one of the above
        if fast:
            raise
        problems.append(Problem(file=file, line=0, message=f"invalid YAML: {err}"))
    except RecursionError:  # pragma: no cover - compose_node's limit comes first
        problems.append(Problem(file=file, line=0, message="invalid YAML: nested too deeply"))
    finally:
        if loader is not None:
            loader.dispose()
    return docs, problems


def _is_empty(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == f"{_TAG}null" and node.value == ""


def _yaml_problem(file: str, err: yaml.MarkedYAMLError) -> Problem:
    mark = err.problem_mark or err.context_mark
    parts = [p for p in (err.context, err.problem) if p]
    return Problem(file=file, line=mark.line + 1 if mark else 0,
                   message="invalid YAML: " + ": ".join(parts))


class _Builder:
    """Builds plain values from one document's nodes, counting every node visited."""

    def __init__(self, file: str, max_depth: int = MAX_DEPTH) -> None:
        self.file = file
        #: ``_Loader`` refuses a node deeper than ``MAX_DEPTH`` as it composes; behind
        #: ``_FastLoader``, a node built at that depth gives the file up to it.
        self.max_depth = max_depth
        self.lines: dict[Path, int] = {}
        self.problems: list[Problem] = []
        self.count = 0
        self._ctor = SafeConstructor()

    def _problem(self, path: Path, line: int, message: str) -> None:
        self.problems.append(Problem(file=self.file, line=line, path=json_path(path),
                                     message=message))

    def build(self, node: Node, path: Path, depth: int) -> object:
        self.count += 1
        if self.count > MAX_NODES:
            raise _Abort(f"document expands to more than {MAX_NODES} YAML nodes "
                               "(aliases of aliases?); refused")
        if depth > self.max_depth:
            raise _Abort(f"document is nested more than {MAX_DEPTH} levels deep")
        line = node.start_mark.line + 1
        lines = self.lines
        if path not in lines:
            lines[path] = line
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                self._problem(path, line, f"unsupported YAML tag {node.tag!r} on a mapping")
                return None
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                self._problem(path, line, f"unsupported YAML tag {node.tag!r} on a sequence")
                return None
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self._scalar(node, path, line)

    def _mapping(self, node: MappingNode, path: Path, depth: int) -> dict[str, object]:
        out: dict[str, object] = {}
        first_line: dict[str, int] = {}
        lines = self.lines
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            key = self._key(key_node, path, key_line)
            if key is None:
                continue
            here = path + (key,)
            if key in out:
                self._problem(here, key_line,
                              f"duplicate key {key!r} (first at line {first_line[key]})")
                continue
            first_line[key] = key_line
            lines[here] = key_line
            if (value_node.tag == _STR and isinstance(value_node, ScalarNode)
                    and self.count < MAX_NODES and depth < self.max_depth):
                self.count += 1  # what build does for a plain text value (its line is set)
                out[key] = str(value_node.value)
            else:
                out[key] = self.build(value_node, here, depth + 1)
        return out

    def _key(self, node: Node, path: Path, line: int) -> str | None:
        if not isinstance(node, ScalarNode):
            self._problem(path, line, "a key must be a plain string, not a mapping or sequence")
            return None
        if node.tag == _STR:
            return str(node.value)
        if node.tag == _MERGE:
            self._problem(path, line, "merge keys ('<<') are not supported; write the keys out")
            return None
        self._problem(path, line, f"key {node.value!r} is not a string to YAML "
                                  f"({node.tag.removeprefix(_TAG)}); quote it")
        return None

    def _scalar(self, node: Node, path: Path, line: int) -> object:
        tag = node.tag
        if tag == _STR or tag == _TIMESTAMP:
            return str(node.value)  # a date stays text; no field wants a datetime
        if tag not in _SCALAR_TAGS:
            self._problem(path, line, f"unsupported YAML tag {tag!r}")
            return None
        try:
            if tag == _NULL:
                return None
            if tag == _BOOL:
                return self._ctor.construct_yaml_bool(node)
            if tag == _INT:
                return self._ctor.construct_yaml_int(node)
            return self._ctor.construct_yaml_float(node)
        except (ValueError, yaml.YAMLError):
            self._problem(path, line, f"cannot read {str(node.value)[:40]!r} as a number")
            return None
