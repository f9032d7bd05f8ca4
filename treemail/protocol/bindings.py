"""The bindings of protocol 19, generated from the wire types: JSON Schema and TypeScript.

Pure: ``generate`` returns every file's text by name; writing and checking them is the
daemon adapter's job (``python -m treemail.adapters.daemon.bindings``). The schema bundle
holds every method's params and result, every notification and server request, the four
JSON-RPC frames, ``error.data`` with the registry's stable codes (``ErrorCode``), the wire
error codes, and every durable event's payload (``treemail.core.events``). An event view is
a union discriminated by ``kind``: one ``<Kind>Event`` per kind, whose ``data`` is that
kind's payload. The TypeScript (``typescript.py``) is derived from the same bundle, so the
two cannot disagree.

What msgspec's schema cannot say, the generator adds from the wire types themselves: the
``EXACTLY_ONE_OF`` groups of a params type become ``oneOf`` alternatives, so the schema
refuses what decoding refuses.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from treemail.core import events
from treemail.protocol import types as t
from treemail.protocol.errors import WIRE_CODES, ErrorData, registered
from treemail.protocol.forward import without_unknown
from treemail.protocol.frames import FRAMES
from treemail.protocol.methods import (
    METHODS,
    NOTIFICATIONS,
    PROTOCOL_VERSION,
    SERVER_REQUESTS,
    Method,
)
from treemail.protocol.typescript import typescript

__all__ = ["EVENT_SUFFIX", "SCHEMA_FILE", "TYPESCRIPT_FILE", "generate", "schema_bundle"]

SCHEMA_FILE: Final = "protocol.schema.json"
TYPESCRIPT_FILE: Final = "protocol.ts"
EVENT_SUFFIX: Final = "Event"  # the def of kind K's event view is "<K>Event"
_REF = "#/$defs/{name}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


def _refs(table: dict[str, Method[Any, Any]]) -> dict[str, Any]:
    return {m.name: {"summary": m.summary, "params": _ref(m.params.__name__),
                     "result": _ref(m.result.__name__)}
            for m in table.values()}


def _wire_types() -> list[type[msgspec.Struct]]:
    tables = (METHODS, NOTIFICATIONS, SERVER_REQUESTS)
    found = {t for table in tables for m in table.values() for t in (m.params, m.result)}
    return sorted({*found, *FRAMES, ErrorData}, key=lambda t: t.__name__)


def _exactly_one_of(defs: dict[str, Any]) -> None:
    """Each params type's groups of which exactly one field is given, as ``oneOf``."""
    for name, schema in defs.items():
        groups = getattr(getattr(t, name, None), "EXACTLY_ONE_OF", ())
        rules = [{"oneOf": [{"required": [field],
                             "properties": {field: {"not": {"type": "null"}}}}
                            for field in group]} for group in groups]
        if len(rules) == 1:
            schema.update(rules[0])
        elif rules:
            schema["allOf"] = rules


def _event_views(defs: dict[str, Any], kinds: list[str]) -> None:
    """``EventView`` as the union of one view per kind, each with its payload as ``data``."""
    base = defs["EventView"]
    for kind in kinds:
        properties = {**base["properties"], "kind": {"const": kind},
                      "data": {"$ref": f"#/events/{kind}"}}
        defs[kind + EVENT_SUFFIX] = {
            "title": kind + EVENT_SUFFIX, "description": f"A {kind} event.", "type": "object",
            "properties": properties, "required": base["required"]}
    defs["EventView"] = {
        "title": "EventView", "description": base["description"],
        "oneOf": [_ref(kind + EVENT_SUFFIX) for kind in kinds]}


def _error_codes(defs: dict[str, Any]) -> None:
    """``error.data.code``: one of the registry's stable codes."""
    defs["ErrorCode"] = {"title": "ErrorCode",
                         "description": "A stable treemail error code (spec/errors.json).",
                         "enum": sorted({cls.code for cls in registered()})}
    defs["ErrorData"]["properties"]["code"] = _ref("ErrorCode")


def schema_bundle() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_wire_types(), ref_template=_REF)
    defs: dict[str, Any] = without_unknown(components)
    event_schemas = {kind: {k: v for k, v in schema.items() if k != "$schema"}
                     for kind, schema in events.schemas().items()}
    _exactly_one_of(defs)
    _event_views(defs, list(event_schemas))
    _error_codes(defs)
    frames = {"request": "RequestFrame", "response": "ResponseFrame",
              "error_response": "ErrorResponse", "notification": "NotificationFrame"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"treemail protocol {PROTOCOL_VERSION}",
        "protocol_version": PROTOCOL_VERSION,
        "frames": {role: _ref(name) for role, name in frames.items()},
        "methods": _refs(METHODS),
        "notifications": _refs(NOTIFICATIONS),
        "server_requests": _refs(SERVER_REQUESTS),
        "wire_errors": {str(code): text for code, text in sorted(WIRE_CODES.items())},
        "events": event_schemas,
        "$defs": dict(sorted(defs.items())),
    }


def dump(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def generate() -> dict[str, str]:
    bundle = schema_bundle()
    return {SCHEMA_FILE: dump(bundle), TYPESCRIPT_FILE: typescript(bundle, SCHEMA_FILE)}
