"""The model-facing tool surface, as data: names, JSON Schemas, and function-calling exports.

Each tool has one canonical JSON Schema (draft 2020-12 subset), written to
``spec/schemas/tools/<name>.json``: it states exactly which argument objects the tool layer
accepts. ``tool_definitions`` exports the tools in the OpenAI-compatible function-calling
format; when a tool is exported with ``"strict": true`` its parameters are narrowed so that
every property is listed in ``required`` (strict mode demands it), optional ones as nullable.

``send_message`` is exported with ``"strict": false``: strict mode could only express its
optional ``mode`` as a required ``["string", "null"]``, and ``guards.parse_arguments``
rejects ``"mode": null`` (null is no mode). Exporting it strict would let a conforming model
emit calls the engine refuses, so the schema keeps ``mode`` optional and the engine's strict
argument check stays the only enforcement.

``steer_subagent`` was removed: ``send_message`` with the default mode replaces it, and
asking for it raises ``UnknownTool`` with that hint.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from treemail.core.errors import InvalidToolArguments, UnknownTool

__all__ = [
    "RECEIPT_TOOLS",
    "SCHEMA_DIALECT",
    "SCHEMA_VERSION",
    "TOOLS",
    "TOOL_NAMES",
    "InvalidToolArguments",
    "Tool",
    "UnknownTool",
    "check_keys",
    "function_parameters",
    "json_schema",
    "lookup_tool",
    "schema_files",
    "tool_definitions",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_VERSION = 1

# Delegation tools first, in the order a parent uses them; send_message last.
TOOL_NAMES = ("delegate_subagent", "get_subagent_result", "cancel_subagent", "send_message",
              "message_status", "cancel_message")

# Opt-in (an agent doc's ``receipts: true``; always for an external session's MCP client):
# a sender's view of its own mail, and its recall before any request claimed it.
RECEIPT_TOOLS = ("message_status", "cancel_message")

_REMOVED = {
    "steer_subagent": 'it was removed; use send_message(to=<handle>, body=..., mode="steer") '
    "to steer a subagent, whether it is running, queued or finished",
}




@attrs.frozen
class Tool:
    """One tool: ``properties`` and ``required`` are its canonical argument contract.

    ``strict`` says whether it is exported with ``"strict": true``; ``examples`` are valid
    argument objects, shown in the schema file and checked against the engine by tests.
    """

    name: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    required: tuple[str, ...]
    strict: bool
    examples: tuple[Mapping[str, Any], ...] = ()


_SUBAGENT_REF = (
    "The subagent: its handle as returned by delegate_subagent (e.g. explore_1a2b3c4d), or its "
    "full session UUID."
)

_TO = (
    "The recipient, a member of your own delegation tree (parent, child, sibling, ancestor). "
    "Either its handle, e.g. explore_1a2b3c4d (returned by delegate_subagent, or shown in the "
    'from="..." attribute of a message you received), or its full session UUID. Handles '
    "resolve only inside your tree; an unknown handle fails with a list of valid ones."
)

_MESSAGE_ID = ("The message_id your send_message returned. Only mail you sent has a "
               "receipt.")

_MODE = (
    '"steer" (default): delivered into the recipient\'s current run at its next pause between '
    "model requests, or at the start of its next run if it is not running. "
    '"queue": held until the recipient\'s next run starts, so its current work is not '
    "interrupted. Either way an idle or finished recipient is woken."
)

TOOLS: Mapping[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="delegate_subagent",
            description=(
                "Start a subagent that works on a task in the background. The result names "
                "its handle; use the handle with get_subagent_result, cancel_subagent and "
                "send_message."
            ),
            properties={
                "agent": {"type": "string", "description": "Name of the agent to run."},
                "task": {"type": "string",
                         "description": "The task; it is the subagent's first input."},
                "description": {
                    "type": ["string", "null"],
                    "description": "A few words on what the subagent does, shown to its tree "
                    "peers; null for none.",
                },
            },
            required=("agent", "task"),
            strict=True,
            examples=({"agent": "explore", "task": "List the modules of src/",
                       "description": None},),
        ),
        Tool(
            name="get_subagent_result",
            description="Get the status of a subagent you delegated and its result when done.",
            properties={"to": {"type": "string", "description": _SUBAGENT_REF}},
            required=("to",),
            strict=True,
            examples=({"to": "explore_1a2b3c4d"},),
        ),
        Tool(
            name="cancel_subagent",
            description="Cancel a subagent you delegated; its current run stops.",
            properties={"to": {"type": "string", "description": _SUBAGENT_REF}},
            required=("to",),
            strict=True,
            examples=({"to": "explore_1a2b3c4d"},),
        ),
        Tool(
            name="send_message",
            description=(
                "Send a message to another agent of your delegation tree. Success means the "
                "message was durably accepted: it will be delivered, even across a restart, "
                "but the recipient may not have read it yet. The result carries message_id, "
                "the effective mode and the recipient's state. Replies arrive as new messages "
                "in your input; never poll for them."
            ),
            properties={
                "to": {"type": "string", "description": _TO},
                "body": {"type": "string",
                         "description": "The message text, delivered exactly as written."},
                "mode": {"type": "string", "enum": ["steer", "queue"], "default": "steer",
                         "description": _MODE},
            },
            required=("to", "body"),
            strict=False,
            examples=(
                {"to": "explore_1a2b3c4d", "body": "Also check the tests folder."},
                {"to": "explore_1a2b3c4d", "body": "When done, review docs/.", "mode": "queue"},
                {"to": "5f0c6f1e-2b7a-4c1d-9e8f-0a1b2c3d4e5f", "body": "Stop, the plan changed.",
                 "mode": "steer"},
            ),
        ),
        Tool(
            name="message_status",
            description=(
                "The receipt of a message you sent: its state (accepted, admitted, claimed, "
                "released while pending; consumed once the recipient read it; discarded with "
                "a reason such as \"cancelled by sender\" or \"expired\")."
            ),
            properties={"message_id": {"type": "string", "description": _MESSAGE_ID}},
            required=("message_id",),
            strict=True,
            examples=({"message_id": "5f0c6f1e-2b7a-4c1d-9e8f-0a1b2c3d4e5f"},),
        ),
        Tool(
            name="cancel_message",
            description=(
                "Recall a message you sent that the recipient has not started reading: it "
                "is discarded (reason \"cancelled by sender\") and never shown. Once a "
                "recipient's request holds it, the answer is the error receipt:too_late."
            ),
            properties={"message_id": {"type": "string", "description": _MESSAGE_ID}},
            required=("message_id",),
            strict=True,
            examples=({"message_id": "5f0c6f1e-2b7a-4c1d-9e8f-0a1b2c3d4e5f"},),
        ),
    )
}


def lookup_tool(name: str, available: Iterable[str] = TOOL_NAMES) -> Tool:
    """The tool called ``name`` if it is among ``available``; else ``UnknownTool``."""
    offered = set(available)
    names = [tool for tool in TOOL_NAMES if tool in offered]
    if name in names:
        return TOOLS[name]
    hint = _REMOVED.get(name, "check the spelling")
    raise UnknownTool(
        f"there is no tool {name!r}: {hint}. Available tools: {', '.join(names) or 'none'}",
        tool=name,
        available=tuple(names),
    )


def check_keys(name: str, arguments: Mapping[str, Any]) -> None:
    """An argument object holds only the tool's declared properties: an unknown key is refused
    by name, as ``send_message`` refuses one, never silently ignored."""
    declared = TOOLS[name].properties
    unknown = sorted(str(key) for key in arguments if key not in declared)
    if unknown:
        raise InvalidToolArguments(
            f"{name} has no argument {unknown[0]!r}; its arguments are {', '.join(declared)}",
            tool=name, unknown=unknown)


def json_schema(name: str) -> dict[str, Any]:
    """The canonical JSON Schema of a tool's argument object, as in ``spec/schemas/tools``."""
    tool = lookup_tool(name)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"treemail/tools/{name}/v{SCHEMA_VERSION}",
        "title": name,
        "description": tool.description,
        "type": "object",
        "properties": copy.deepcopy(dict(tool.properties)),
        "required": list(tool.required),
        "additionalProperties": False,
        "examples": copy.deepcopy(list(tool.examples)),
    }


def function_parameters(name: str) -> dict[str, Any]:
    """The ``parameters`` a model is given: the schema without its annotations, strict-narrowed.

    In strict mode every property is required, so an optional property must already accept
    null (``TOOLS`` declares it so) and the model passes null to leave it out.
    """
    tool = lookup_tool(name)
    required = list(tool.properties) if tool.strict else list(tool.required)
    return {
        "type": "object",
        "properties": copy.deepcopy(dict(tool.properties)),
        "required": required,
        "additionalProperties": False,
    }


def tool_definitions(visible: Iterable[str]) -> list[dict[str, Any]]:
    """The visible tools in the OpenAI-compatible function-calling format, in ``TOOL_NAMES``
    order (stable, so a prompt prefix cache survives); an unknown name raises ``UnknownTool``.
    """
    if isinstance(visible, str):  # a lone name would be split into letters
        raise TypeError("tool_definitions takes an iterable of tool names, not one name")
    wanted = set(visible)
    for name in sorted(wanted):
        lookup_tool(name)
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": TOOLS[name].description,
                "parameters": function_parameters(name),
                "strict": TOOLS[name].strict,
            },
        }
        for name in TOOL_NAMES
        if name in wanted
    ]


def schema_files() -> dict[str, str]:
    """Every tool schema file, by path relative to ``spec/``, with its exact text."""
    return {
        f"schemas/tools/{name}.json": json.dumps(json_schema(name), indent=2,
                                                 ensure_ascii=False) + "\n"
        for name in TOOL_NAMES
    }
