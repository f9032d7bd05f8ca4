"""The model-facing tool surface: strict schemas, the function-calling export, unknown tools,
the schema files under spec/, and agreement between the send_message schema and the engine's
own argument check (``guards.parse_arguments``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from treemail.core.errors import InvalidArguments, Refusal
from treemail.core.guards import parse_arguments
from treemail.core.records import Mode
from treemail.core.tools import (
    SCHEMA_DIALECT,
    TOOL_NAMES,
    TOOLS,
    UnknownTool,
    function_parameters,
    json_schema,
    lookup_tool,
    schema_files,
    tool_definitions,
)

SPEC = Path(__file__).resolve().parents[2] / "spec"
REGENERATE = (
    ".venv/bin/python -c \"from pathlib import Path; from treemail.core.tools import "
    "schema_files; [(Path('spec') / p).write_text(t, encoding='utf-8') "
    "for p, t in schema_files().items()]\""
)

# What OpenAI strict mode accepts in our schemas; annotations such as default are refused.
STRICT_KEYWORDS = {"type", "description", "enum", "properties", "required",
                   "additionalProperties"}
_TYPES: Mapping[str, type | tuple[type, ...]] = {
    "string": str, "object": dict, "null": type(None), "boolean": bool, "array": list,
}


def violations(schema: Mapping[str, Any], value: object) -> list[str]:
    """A validator for the subset of JSON Schema the tool schemas use."""
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(isinstance(value, _TYPES[name]) for name in names):
            return [f"{value!r} is not of type {names}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{value!r} not in {schema['enum']}"]
    if not isinstance(value, dict):
        return []
    found = [f"missing {key}" for key in schema.get("required", ()) if key not in value]
    properties = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        found += [f"unexpected {key}" for key in value if key not in properties]
    for key, sub in properties.items():
        if key in value:
            found += violations(sub, value[key])
    return found


def walk(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    nested = [walk(sub) for sub in schema.get("properties", {}).values()]
    return [schema, *(node for sub in nested for node in sub)]


# -- the schemas -------------------------------------------------------------------------


def test_tool_names_are_the_surface_without_steer_subagent() -> None:
    assert TOOL_NAMES == ("delegate_subagent", "get_subagent_result", "cancel_subagent",
                          "send_message", "message_status", "cancel_message")
    assert tuple(TOOLS) == TOOL_NAMES
    assert "steer_subagent" not in TOOLS


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_canonical_schema_is_a_closed_object(name: str) -> None:
    schema = json_schema(name)
    assert schema["$schema"] == SCHEMA_DIALECT
    assert schema["$id"] == f"treemail/tools/{name}/v1"
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) <= set(schema["properties"])
    assert schema["examples"], "every tool shows at least one valid argument object"
    for example in schema["examples"]:
        assert violations(schema, example) == []


def test_send_message_schema_states_the_contract() -> None:
    schema = json_schema("send_message")
    assert list(schema["properties"]) == ["to", "body", "mode"]
    assert schema["required"] == ["to", "body"]
    mode = schema["properties"]["mode"]
    assert (mode["type"], mode["enum"], mode["default"]) == ("string", ["steer", "queue"], "steer")
    to = schema["properties"]["to"]["description"]
    assert "handle" in to and "UUID" in to
    assert "durably accepted" in schema["description"]
    assert "steer" in mode["description"] and "queue" in mode["description"]


def test_delegate_description_is_optional_and_nullable() -> None:
    schema = json_schema("delegate_subagent")
    assert schema["required"] == ["agent", "task"]
    assert schema["properties"]["description"]["type"] == ["string", "null"]


# -- the function-calling export --------------------------------------------------------


def test_export_format() -> None:
    definitions = tool_definitions(TOOL_NAMES)
    assert [d["function"]["name"] for d in definitions] == list(TOOL_NAMES)
    for definition in definitions:
        assert set(definition) == {"type", "function"}
        assert definition["type"] == "function"
        function = definition["function"]
        assert set(function) == {"name", "description", "parameters", "strict"}
        assert function["description"] == TOOLS[function["name"]].description
        assert function["parameters"] == function_parameters(function["name"])
        assert not {"$schema", "$id", "examples", "title"} & set(function["parameters"])
    json.dumps(definitions)  # plain JSON, ready for a request body


@pytest.mark.parametrize("name", [n for n in TOOL_NAMES if TOOLS[n].strict])
def test_strict_exports_satisfy_strict_mode(name: str) -> None:
    parameters = function_parameters(name)
    assert parameters["required"] == list(parameters["properties"])
    assert parameters["additionalProperties"] is False
    for node in walk(parameters):
        assert set(node) <= STRICT_KEYWORDS
    optional = set(TOOLS[name].properties) - set(TOOLS[name].required)
    for key in optional:  # strict mode makes it required, so null must stand for "absent"
        assert "null" in parameters["properties"][key]["type"]
    canonical = json_schema(name)
    for example in TOOLS[name].examples:
        exported = {key: example.get(key) for key in parameters["properties"]}
        assert violations(parameters, exported) == []
        assert violations(canonical, exported) == [], "strict calls stay within the contract"


def test_send_message_is_exported_non_strict_because_the_engine_refuses_null_mode() -> None:
    # If parse_arguments ever accepts "mode": null, send_message can be exported strict with
    # mode as a required ["string", "null"]; this test then fails to say so.
    with pytest.raises(InvalidArguments):
        parse_arguments({"to": "explore_1a2b3c4d", "body": "hi", "mode": None})
    (definition,) = tool_definitions(["send_message"])
    assert definition["function"]["strict"] is False
    assert definition["function"]["parameters"]["required"] == ["to", "body"]
    assert definition["function"]["parameters"]["additionalProperties"] is False


def test_export_keeps_canonical_order_and_only_the_visible_tools() -> None:
    names = [d["function"]["name"]
             for d in tool_definitions(["send_message", "delegate_subagent", "send_message"])]
    assert names == ["delegate_subagent", "send_message"]
    assert tool_definitions([]) == []
    with pytest.raises(TypeError):
        tool_definitions("send_message")


def test_exports_are_copies() -> None:
    tool_definitions(["send_message"])[0]["function"]["parameters"]["properties"].clear()
    json_schema("send_message")["properties"].clear()
    assert "to" in tool_definitions(["send_message"])[0]["function"]["parameters"]["properties"]
    assert "to" in TOOLS["send_message"].properties


# -- unknown tools -----------------------------------------------------------------------


def test_steer_subagent_is_unknown_with_its_replacement() -> None:
    with pytest.raises(UnknownTool) as caught:
        lookup_tool("steer_subagent")
    error = caught.value
    assert isinstance(error, Refusal)
    assert error.code == UnknownTool.code
    assert "send_message" in error.message and 'mode="steer"' in error.message
    assert all(name in error.message for name in TOOL_NAMES)
    with pytest.raises(UnknownTool):
        tool_definitions(["delegate_subagent", "steer_subagent"])


def test_unknown_tool_lists_only_what_is_available() -> None:
    visible = ["delegate_subagent", "get_subagent_result", "cancel_subagent"]
    with pytest.raises(UnknownTool) as caught:
        lookup_tool("send_message", visible)
    assert caught.value.details["available"] == tuple(visible)
    assert "send_message" not in caught.value.message.split("Available tools:")[1]
    with pytest.raises(UnknownTool, match="check the spelling"):
        lookup_tool("send_mesage")
    assert lookup_tool("send_message") is TOOLS["send_message"]


# -- the schema files --------------------------------------------------------------------


def test_schema_files_are_in_sync() -> None:
    for relative, text in schema_files().items():
        path = SPEC / relative
        assert path.exists(), f"{relative} is missing; regenerate with {REGENERATE}"
        assert path.read_text(encoding="utf-8") == text, f"{relative} is stale: {REGENERATE}"
        assert json.loads(text) == json_schema(path.stem)
    on_disk = {f"schemas/tools/{p.name}" for p in (SPEC / "schemas" / "tools").glob("*.json")}
    assert on_disk == set(schema_files()), "a schema file names no tool"


# -- the send_message schema against the engine's argument check ------------------------


@pytest.mark.parametrize("example", TOOLS["send_message"].examples)
def test_every_send_message_example_is_accepted(example: Mapping[str, Any]) -> None:
    parsed = parse_arguments(example)
    assert (parsed.to, parsed.body) == (example["to"], example["body"])
    assert parsed.mode == Mode(example.get("mode", "steer"))


@pytest.mark.parametrize(
    "arguments",
    [
        {"to": "explore_1a2b3c4d"},
        {"body": "hi"},
        {"to": "explore_1a2b3c4d", "body": "hi", "mode": "broadcast"},
        {"to": "explore_1a2b3c4d", "body": "hi", "mode": None},
        {"to": "explore_1a2b3c4d", "body": "hi", "priority": "high"},
        {"recipient_session_id": "explore_1a2b3c4d", "body": "hi"},
        {"to": 7, "body": "hi"},
        {"to": "explore_1a2b3c4d", "body": ["hi"]},
    ],
)
def test_schema_and_engine_reject_alike(arguments: dict[str, Any]) -> None:
    assert violations(json_schema("send_message"), arguments) != []
    with pytest.raises(InvalidArguments):
        parse_arguments(arguments)
