"""Inputs for the fuzz suites: arbitrary JSON, the tool schemas, and hostile strings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

SCHEMAS = Path(__file__).resolve().parents[2] / "spec" / "schemas" / "tools"

# Text as models emit it, lone surrogates included (Hypothesis leaves them out by default).
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.sampled_from(("", " ", "\n", "\x00", "😀" * 130, "x" * 300, "explore_00000000")),
)

JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values a property schema of ours admits: an enum, or strings and nulls by its type."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return st.one_of([TEXT if kind == "string" else st.none() for kind in kinds])


def from_tool_schema(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Argument objects valid under ``spec/schemas/tools/<name>.json``: every required
    property, any subset of the optional ones. (The tool schemas use only object, string,
    null and enum, so this small reader covers them; it refuses anything else.)"""
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.json").read_text())
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    properties = schema["properties"]
    assert all(set(p) <= {"type", "enum", "default", "description"} for p in properties.values())
    required = {key: _value(properties[key]) for key in schema["required"]}
    optional = {key: _value(p) for key, p in properties.items() if key not in required}
    return st.fixed_dictionaries(required, optional=optional)


def arguments(name: str) -> st.SearchStrategy[Any]:
    """Valid argument objects of tool ``name`` (from its schema), and arbitrary JSON."""
    return st.one_of(from_tool_schema(name), JSON,
                     st.dictionaries(st.sampled_from(("to", "body", "mode", "agent", "task")),
                                     JSON, max_size=4))
