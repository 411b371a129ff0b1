"""A JSON Schema compiled to one yes/no function, for the common case: valid (PURE).

``jsonschema`` explains every error with its path; it is also slow — one
document of a fleet repository took ~3 ms, most of ``reconcile fleet``'s load
at 10,000 nodes. ``schemacheck`` asks ``compile_schema(schema)(value)`` first,
and only a document it does not accept goes through ``jsonschema`` for the
messages; so what is reported never changes, only how fast a clean set loads.

``compile_schema`` turns a Draft 2020-12 schema into nested closures, mirroring
``jsonschema``'s keyword functions (``jsonschema/_keywords.py``): the same type
checker (``1.0`` is an integer, ``true`` is not a number), the same equality
for ``const`` / ``enum`` / ``uniqueItems`` (``true`` is not ``1``), and the
schema's ``pattern`` compiled as ``schemacheck`` compiles it (``$`` is the end
of the text). It may say no where ``jsonschema`` says yes — that only costs a
full run — but never yes where it says no (tests/manifests/test_schemafast.py
checks both ways). A keyword it does not know makes ``compile_schema`` raise
``Unsupported``: the caller then always runs ``jsonschema``. Values other than
dict, list, str, int, float, bool and None are never accepted.
"""

from __future__ import annotations

from typing import Any, Callable

Check = Callable[[Any], bool]

#: Keywords that say nothing about validity.
_ANNOTATIONS = frozenset({"$schema", "$comment", "$defs", "title", "description",
                          "errorMessage", "examples", "default", "deprecated"})
#: Keywords compiled below; ``then`` / ``else`` / ``prefixItems`` ride with ``if`` / ``items``.
_KNOWN = frozenset({"type", "$ref", "const", "enum", "allOf", "anyOf", "oneOf", "not", "if",
                    "then", "else", "properties", "required", "additionalProperties",
                    "maxProperties", "propertyNames", "items", "prefixItems", "minItems",
                    "maxItems", "uniqueItems", "pattern", "minLength", "maxLength", "minimum",
                    "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})
_NUMBERS = (int, float)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_REFUSE: tuple[Check, ...] = (lambda v: False,)  # a value of any other type


class Unsupported(Exception):
    """The schema uses a keyword (or a ``$ref``) this compiler does not mirror."""


def _is_integer(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and v.is_integer())


_TYPES: dict[str, Check] = {
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "string": lambda v: type(v) is str,
    "integer": _is_integer,
    "number": lambda v: type(v) in _NUMBERS,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def equal(one: Any, two: Any) -> bool:
    """``jsonschema._utils.equal``: ``==``, except that booleans are not numbers."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return len(one) == len(two) and all(k in two and equal(v, two[k]) for k, v in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return False  # one of them is a boolean, and they are not the same object
    return bool(one == two)


def _unique(items: list[Any]) -> bool:
    """No two entries ``equal`` (what ``jsonschema._utils.uniq`` finds).

    Scalars through a set (a boolean keyed apart: ``true`` is not ``1``), in
    linear time; a list holding lists or mappings pairwise.
    """
    if all(type(x) in _SCALARS for x in items):
        return len({(bool, x) if type(x) is bool else x for x in items}) == len(items)
    return not any(equal(items[i], items[j])
                   for i in range(len(items)) for j in range(i + 1, len(items)))


def compile_schema(root: dict[str, Any], pattern: Callable[[str], Callable[[str], Any]]) -> Check:
    """``value → valid?`` for ``root``; ``pattern(p)`` is the search function of ``p``.

    Only local references (``#/…``) are followed, each compiled once (a
    recursive schema works: a reference is looked up when first used).
    """
    compiled: dict[str, Check] = {}
    compiling: set[str] = set()

    def ref(pointer: str) -> Check:
        if not pointer.startswith("#"):
            raise Unsupported(f"$ref {pointer!r}")
        target: Any = root
        for part in [p for p in pointer[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                target = target[int(part)] if isinstance(target, list) else target[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise Unsupported(f"$ref {pointer!r} points nowhere") from None
        if pointer in compiled:
            return compiled[pointer]
        if pointer in compiling:  # a recursive schema: looked up when first used
            return lambda v: compiled[pointer](v)
        compiling.add(pointer)
        compiled[pointer] = node(target)
        return compiled[pointer]

    def node(schema: Any) -> Check:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise Unsupported(f"schema {schema!r}")
        unknown = set(schema) - _KNOWN - _ANNOTATIONS
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        return _mapping(schema, node, ref, pattern)

    return node(root)


def _mapping(schema: dict[str, Any], node: Callable[[Any], Check], ref: Callable[[str], Check],
             pattern: Callable[[str], Callable[[str], Any]]) -> Check:
    """One schema object: the checks for any value, then those for its type."""
    every: list[Check] = []
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        try:
            preds = [_TYPES[w] for w in wanted]
        except (KeyError, TypeError):
            raise Unsupported(f"type {schema['type']!r}") from None
        every.append(preds[0] if len(preds) == 1 else lambda v: any(p(v) for p in preds))
    if "const" in schema:
        const = schema["const"]
        every.append(lambda v: equal(v, const))
    if "enum" in schema:
        enum = list(schema["enum"])
        if all(type(e) is str for e in enum):  # text equals only text: a set will do
            texts = frozenset(enum)
            every.append(lambda v: type(v) is str and v in texts)
        else:
            every.append(lambda v: any(equal(e, v) for e in enum))
    if "$ref" in schema:
        every.append(ref(schema["$ref"]))
    every += [node(s) for s in schema.get("allOf", ())]
    if "anyOf" in schema:
        anyof = [node(s) for s in schema["anyOf"]]
        every.append(lambda v: any(c(v) for c in anyof))
    if "oneOf" in schema:
        oneof = [node(s) for s in schema["oneOf"]]

        def exactly_one(v: Any) -> bool:
            found = False
            for c in oneof:
                if c(v):
                    if found:
                        return False
                    found = True
            return found
        every.append(exactly_one)
    if "not" in schema:
        negated = node(schema["not"])
        every.append(lambda v: not negated(v))
    if "if" in schema:
        cond = node(schema["if"])
        then = node(schema.get("then", True))
        other = node(schema.get("else", True))
        every.append(lambda v: then(v) if cond(v) else other(v))
    by_type: dict[type, tuple[Check, ...]] = {}
    for kind, checks in ((dict, _object(schema, node)), (list, _array(schema, node)),
                         (str, _string(schema, pattern)), (int, _number(schema)),
                         (float, _number(schema))):
        if checks:
            by_type[kind] = tuple(checks)
    if len(every) == 1 and not by_type:
        only = every[0]
        return lambda v: type(v) in _PLAIN and only(v)
    checks = {t: tuple(every) + by_type.get(t, ()) for t in _PLAIN}  # type → all its checks

    def check(v: Any) -> bool:
        for c in checks.get(type(v), _REFUSE):
            if not c(v):
                return False
        return True

    return check


def _object(schema: dict[str, Any], node: Callable[[Any], Check]) -> list[Check]:
    """``properties`` and ``additionalProperties`` in one pass over the value's keys (a
    schema may list thirty; a mapping holds a few), then the rest."""
    out: list[Check] = []
    props = {k: node(s) for k, s in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, dict):
        rest: Check | bool = node(extra)
    elif extra is True or not extra:  # jsonschema: any other falsy value is false
        rest = extra is True
    else:
        raise Unsupported(f"additionalProperties {extra!r}")
    if props or rest is not True:
        def members(v: dict[Any, Any]) -> bool:
            for k, x in v.items():
                c = props.get(k)
                if c is not None:
                    if not c(x):
                        return False
                elif rest is not True and (rest is False or not rest(x)):  # type: ignore[operator]
                    return False
            return True
        out.append(members)
    if schema.get("required"):
        required = tuple(schema["required"])

        def present(v: dict[Any, Any]) -> bool:
            for k in required:
                if k not in v:
                    return False
            return True
        out.append(present)
    if "maxProperties" in schema:
        most = schema["maxProperties"]
        out.append(lambda v: not len(v) > most)
    if "propertyNames" in schema:
        names = node(schema["propertyNames"])
        out.append(lambda v: all(names(k) for k in v))
    return out


def _array(schema: dict[str, Any], node: Callable[[Any], Check]) -> list[Check]:
    out: list[Check] = []
    prefix = [node(s) for s in schema.get("prefixItems", ())]
    if prefix:
        out.append(lambda v: all(c(x) for c, x in zip(prefix, v)))
    if "items" in schema:
        start = len(schema.get("prefixItems", ()))
        sub = node(schema["items"])

        def each(v: list[Any]) -> bool:
            for x in v[start:] if start else v:
                if not sub(x):
                    return False
            return True
        out.append(each)
    out += _lengths(schema, "minItems", "maxItems")
    if schema.get("uniqueItems"):
        out.append(_unique)
    return out


def _string(schema: dict[str, Any], pattern: Callable[[str], Callable[[str], Any]]) -> list[Check]:
    out: list[Check] = []
    if "pattern" in schema:
        search = pattern(schema["pattern"])
        out.append(lambda v: search(v) is not None)
    out += _lengths(schema, "minLength", "maxLength")
    return out


def _lengths(schema: dict[str, Any], least_key: str, most_key: str) -> list[Check]:
    """Bounds on ``len(v)``: an array's ``minItems``/``maxItems``, a string's
    ``minLength``/``maxLength``."""
    out: list[Check] = []
    if least_key in schema:
        least = schema[least_key]
        out.append(lambda v: not len(v) < least)
    if most_key in schema:
        most = schema[most_key]
        out.append(lambda v: not len(v) > most)
    return out


def _number(schema: dict[str, Any]) -> list[Check]:
    out: list[Check] = []
    if "minimum" in schema:
        low = schema["minimum"]
        out.append(lambda v: not v < low)
    if "maximum" in schema:
        high = schema["maximum"]
        out.append(lambda v: not v > high)
    if "exclusiveMinimum" in schema:
        low_x = schema["exclusiveMinimum"]
        out.append(lambda v: not v <= low_x)
    if "exclusiveMaximum" in schema:
        high_x = schema["exclusiveMaximum"]
        out.append(lambda v: not v >= high_x)
    return out
