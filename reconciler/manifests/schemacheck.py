"""JSON Schema validation with messages an operator can act on (PURE).

``jsonschema``'s Draft 2020-12 validator collects every error; this module
turns each into a ``Problem`` at the right line. Default messages that say
more about the schema than about the mistake are rewritten: unknown keys are
named one by one (with a "did you mean"), missing keys say why they are
needed, and a subschema's ``errorMessage`` (the keyword editors also show)
replaces cryptic pattern / oneOf / not messages.

A document ``schemafast``'s compiled check accepts has no problems and skips
``jsonschema`` (ten times slower; not even imported for a clean set); the
others go through it for the messages.

``pattern`` is checked with ECMA-262 semantics (``$`` is the end of the
text), as editors do, so ``"name\\n"`` does not pass for ``"name"``.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import TYPE_CHECKING, Any, Iterator

from reconciler.manifests import schemafast, schemata
from reconciler.core.errors import Problem
from reconciler.manifests.yamlsafe import Document, Path

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

#: Why a conditionally required key is required: (key, kind) → hint.
_REQUIRED_WHY: dict[tuple[str, str], str] = {
    ("model", "InferenceSpec"): "a managed role needs a model",
    ("serve", "InferenceSpec"): "serve.port is required except for ollama",
    ("port", "InferenceSpec"): "required except for ollama, which defaults to 11434",
    ("root", "Model"): "required unless the format is ollama or every file has a source",
    ("shards", "Model"): "required unless the format is ollama",
    ("source", "Model"): "format ollama needs source.ollama_tag",
    ("ollama_tag", "Model"): "format ollama needs the Ollama model name",
}

_TYPE_NAMES = {
    "object": "a mapping", "array": "a list", "string": "a string",
    "integer": "a whole number", "number": "a number", "boolean": "true or false",
    "null": "empty",
}


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    compiled = _compile(pattern)
    if not compiled.search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 with ECMA ``pattern``; jsonschema is imported only when a document
    needs its messages (a clean set never does: ``schemafast``)."""
    import jsonschema
    import jsonschema.validators

    return jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                        {"pattern": _ecma_pattern})


@functools.cache
def _validator(kind: str) -> Any:
    return _validator_class()(schemata.schema(kind))


@functools.cache
def _fast(kind: str) -> schemafast.Check | None:
    """The compiled yes/no check of ``kind``'s schema; None: it cannot be compiled."""
    try:
        return schemafast.compile_schema(schemata.schema(kind), lambda p: _compile(p).search)
    except schemafast.Unsupported:  # pragma: no cover - tests/manifests/test_schemafast.py
        return None


def check(doc: Document, kind: str, *, skip: tuple[Path, ...] = ()) -> list[Problem]:
    """Every schema problem of one document of a known kind.

    Problems strictly below a path in ``skip`` are left out: the caller checks
    those values in code with better messages (``extra_args``).
    """
    fast = _fast(kind)
    if fast is not None and fast(doc.value):
        return []  # valid: nothing to explain (schemafast.py)
    problems: list[Problem] = []
    for error in _validator(kind).iter_errors(doc.value):
        path: Path = tuple(error.absolute_path)
        if any(len(path) > len(s) and path[: len(s)] == s for s in skip):
            continue
        for where, message in _explain(error, kind):
            problems.append(doc.problem(where, message))
    return problems


def _explain(error: ValidationError, kind: str) -> list[tuple[Path, str]]:
    path: Path = tuple(error.absolute_path)
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    instance = error.instance
    if "propertyNames" in error.absolute_schema_path:
        path = path + (str(instance),)
    if keyword == "additionalProperties" and isinstance(instance, dict):
        known = list(schema.get("properties", {}))
        out = []
        for key in sorted(k for k in instance if k not in known):
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append((path + (key,), f"unknown key {key!r}{hint}"))
        return out
    if keyword == "required":
        match = re.match(r"^'(.*)' is a required property$", error.message)
        key = match.group(1) if match else str(error.message)
        why = _REQUIRED_WHY.get((key, kind)) if _conditional(error) else None
        return [(path, f"missing required key {key!r}" + (f" ({why})" if why else ""))]
    if keyword == "not" and error.validator_value == {}:
        return [(path, str(schema.get("errorMessage", "not allowed here")))]
    custom = schema.get("errorMessage")
    if custom is not None:
        quote = schema.get("type") == "string" and isinstance(instance, (bool, int, float))
        hint = " (YAML read it as a number or boolean: quote it)" if quote else ""
        return [(path, f"{custom}, not {_show(instance)}{hint}")]
    return [(path, _default(keyword, error.validator_value, instance, error.message))]


def _conditional(error: ValidationError) -> bool:
    return any(step in ("then", "else") for step in error.absolute_schema_path)


def _default(keyword: object, value: Any, instance: Any, fallback: str) -> str:
    if keyword == "type":
        wanted = value if isinstance(value, list) else [value]
        names = " or ".join(_TYPE_NAMES.get(w, w) for w in wanted)
        return f"must be {names}, not {_show(instance)}"
    if keyword == "enum":
        return f"must be one of {', '.join(map(repr, value))}, not {_show(instance)}"
    if keyword == "const":
        return f"must be {value!r}, not {_show(instance)}"
    if keyword in ("minimum", "exclusiveMinimum"):
        return f"must be at least {value}" + ("" if keyword == "minimum" else " (exclusive)")
    if keyword in ("maximum", "exclusiveMaximum"):
        return f"must be at most {value}" + ("" if keyword == "maximum" else " (exclusive)")
    if keyword == "minItems":
        return f"must have at least {value} entr{'y' if value == 1 else 'ies'}"
    if keyword == "maxItems":
        return f"must have at most {value} entries"
    if keyword == "minLength":
        return "must not be empty" if value == 1 else f"must be at least {value} characters"
    if keyword == "maxLength":
        return f"must be at most {value} characters"
    if keyword == "maxProperties":
        return f"must have at most {value} keys"
    if keyword == "uniqueItems":
        return "entries must be unique"
    return fallback


def _show(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."
