"""Params for every protocol method, generated from spec/bindings/protocol.schema.json.

hypothesis-jsonschema 0.23.1 does not work with our Hypothesis, so this small generator
reads the subset of JSON Schema the bindings use ($ref, anyOf, oneOf, const, enum, object
with properties and required, string (with a pattern: matching text, and any text), integer,
number, boolean, null, array with items) and refuses any
other keyword, so a new one in the bindings fails here instead of being ignored. Besides
valid params it makes wrong ones: a value of the wrong type, an unknown key, a required key
missing, or arbitrary JSON in place of the whole object.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.strategies import JSON, TEXT

__all__ = ["JSON_VALUES", "params_for"]

BINDINGS = Path(__file__).resolve().parents[2] / "spec" / "bindings" / "protocol.schema.json"
# Keywords that only describe, and those this reader turns into values.
_NOTES = {"title", "description", "default", "$comment"}
# Bounds (minimum, lengths, pattern, an object's oneOf of required fields) are not aimed at:
# the text and integers drawn fall on both sides of them, so params break them too.
_SHAPES = {"$ref", "anyOf", "oneOf", "const", "enum", "type", "properties", "required",
           "additionalProperties", "items", "minimum", "maximum", "pattern", "minLength",
           "maxLength"}

# Arbitrary JSON, with big integers and long text besides the shared strategy's.
JSON_VALUES: st.SearchStrategy[Any] = st.one_of(
    JSON, st.integers(min_value=-(10**30), max_value=10**30), st.text(min_size=500,
                                                                        max_size=2000))


@cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(BINDINGS.read_text())
    return document


def _value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    unknown = set(schema) - _NOTES - _SHAPES
    assert not unknown, f"the bindings use {unknown}: teach schema_values to generate it"
    if "$ref" in schema:
        return st.deferred(lambda: _value(_document()["$defs"][schema["$ref"].split("/")[-1]]))
    if "anyOf" in schema:
        return st.one_of([_value(option) for option in schema["anyOf"]])
    if "oneOf" in schema and "type" not in schema:
        return st.one_of([_value(option) for option in schema["oneOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return st.one_of([_typed(kind, schema) for kind in kinds])


def _typed(kind: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if kind == "object":
        return _object(schema)
    if kind == "array":
        return st.lists(_value(schema.get("items", {"type": "null"})), max_size=3)
    if kind == "string" and "pattern" in schema:
        return st.one_of(st.from_regex(schema["pattern"], fullmatch=True), TEXT)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "string": TEXT, "boolean": st.booleans(), "null": st.none(),
        "integer": st.one_of(st.integers(-5, 300), st.integers(), st.sampled_from(
            (2**63, -(2**63) - 1, 2**64, 10**30))),
        "number": st.floats()}
    return simple[kind]


def _object(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {key: _value(properties[key]) for key in sorted(required)},
        optional={key: _value(p) for key, p in properties.items() if key not in required})


def _params_schema(method: str) -> dict[str, Any]:
    ref: str = _document()["methods"][method]["params"]["$ref"]
    schema: dict[str, Any] = _document()["$defs"][ref.split("/")[-1]]
    return schema


@st.composite
def _wrong(draw: st.DrawFn, method: str) -> Any:
    """Params the method's type must refuse (or, by chance, accept): one change each."""
    schema = _params_schema(method)
    params: dict[str, Any] = draw(_object(schema))
    keys = sorted(schema.get("properties", {}))
    change = draw(st.sampled_from(("retype", "unknown", "drop", "replace")))
    if change == "retype" and keys:
        params[draw(st.sampled_from(keys))] = draw(JSON_VALUES)
    elif change == "unknown":
        params[draw(TEXT)] = draw(JSON_VALUES)
    elif change == "drop" and params:
        params.pop(draw(st.sampled_from(sorted(params))))
    elif change == "replace":
        return draw(JSON_VALUES)
    return params


def params_for(method: str) -> st.SearchStrategy[Any]:
    """Valid params of ``method`` per the bindings, and wrong ones."""
    return st.one_of(_object(_params_schema(method)), _wrong(method))
