"""The bindings of protocol 19, generated from the wire types: JSON Schema and TypeScript.

Pure: ``generate`` returns every file's text by name; writing and checking them is the
daemon adapter's job (``python -m treemail.adapters.daemon.bindings``). The schema bundle
holds every method's params and result, every notification and server request, the wire
error codes, and every durable event's payload (``treemail.core.events``, which the
``events/event`` and ``plugin/event`` notifications carry as ``data``). The TypeScript is
derived from the same bundle, so the two cannot disagree.

``fingerprint`` hashes the bundle without its version number: a change of any wire type
changes it, and ``spec/bindings/fingerprints.json`` pins one fingerprint per protocol version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

from treemail.core import events
from treemail.protocol.errors import WIRE_CODES
from treemail.protocol.methods import (
    METHODS,
    NOTIFICATIONS,
    PROTOCOL_VERSION,
    SERVER_REQUESTS,
    Method,
)

__all__ = ["SCHEMA_FILE", "TYPESCRIPT_FILE", "fingerprint", "generate", "schema_bundle",
           "typescript"]

SCHEMA_FILE = "protocol.schema.json"
TYPESCRIPT_FILE = "protocol.d.ts"
_REF = "#/$defs/{name}"


def _refs(table: dict[str, Method[Any, Any]]) -> dict[str, Any]:
    return {m.name: {"summary": m.summary, "params": {"$ref": _REF.format(name=m.params.__name__)},
                     "result": {"$ref": _REF.format(name=m.result.__name__)}}
            for m in table.values()}


def schema_bundle() -> dict[str, Any]:
    tables = (METHODS, NOTIFICATIONS, SERVER_REQUESTS)
    types = sorted({t for table in tables for m in table.values() for t in (m.params, m.result)},
                   key=lambda t: t.__name__)
    _, defs = msgspec.json.schema_components(types, ref_template=_REF)
    event_schemas = {kind: {k: v for k, v in schema.items() if k != "$schema"}
                     for kind, schema in events.schemas().items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"treemail protocol {PROTOCOL_VERSION}",
        "protocol_version": PROTOCOL_VERSION,
        "methods": _refs(METHODS),
        "notifications": _refs(NOTIFICATIONS),
        "server_requests": _refs(SERVER_REQUESTS),
        "wire_errors": {str(code): text for code, text in sorted(WIRE_CODES.items())},
        "events": event_schemas,
        "$defs": dict(sorted(defs.items())),
    }


def _dump(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def fingerprint(bundle: dict[str, Any]) -> str:
    wire = {k: v for k, v in bundle.items() if k not in ("protocol_version", "title")}
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()


def generate() -> dict[str, str]:
    bundle = schema_bundle()
    return {SCHEMA_FILE: _dump(bundle), TYPESCRIPT_FILE: typescript(bundle)}


# -- TypeScript ----------------------------------------------------------------------------


def _ts(schema: Any) -> str:
    """A TypeScript type for a JSON Schema, in the subset msgspec and core.events emit."""
    if not isinstance(schema, dict) or not schema:
        return "unknown"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_ts(s) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts({**schema, "type": k}) for k in kind)
    return _typed(kind, schema)


def _typed(kind: object, schema: dict[str, Any]) -> str:
    if kind == "array":
        item = _ts(schema.get("items"))
        return f"Array<{item}>"
    if kind == "object":
        if "properties" in schema:
            return _object(schema, "")
        extra = schema.get("additionalProperties")
        return f"Record<string, {_ts(extra) if isinstance(extra, dict) else 'unknown'}>"
    simple = {"string": "string", "integer": "number", "number": "number",
              "boolean": "boolean", "null": "null"}
    return simple.get(str(kind), "unknown")


def _object(schema: dict[str, Any], indent: str) -> str:
    required = set(schema.get("required", ()))
    lines = ["{"]
    for name, prop in schema.get("properties", {}).items():
        optional = "" if name in required else "?"
        lines.append(f"{indent}  {name}{optional}: {_ts(prop)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _doc(schema: dict[str, Any]) -> list[str]:
    text = " ".join(str(schema.get("description", "")).split()).replace("*/", "* /")
    return [f"/** {text} */"] if text else []


def _table_type(name: str, table: dict[str, Any]) -> list[str]:
    lines = [f"export interface {name} {{"]
    for method, entry in table.items():
        lines.append(f"  {json.dumps(method)}: {{ params: {_ts(entry['params'])}; "
                     f"result: {_ts(entry['result'])} }};")
    return [*lines, "}", ""]


def typescript(bundle: dict[str, Any]) -> str:
    out = [f"// Generated from {SCHEMA_FILE} by `just write-bindings`; do not edit.", "",
           f"export declare const PROTOCOL_VERSION: {bundle['protocol_version']};", ""]
    for name, schema in bundle["$defs"].items():
        out += [*_doc(schema), f"export interface {name} {_object(schema, '')}", ""]
    out += _table_type("Methods", bundle["methods"])
    out += _table_type("Notifications", bundle["notifications"])
    out += _table_type("ServerRequests", bundle["server_requests"])
    kinds = list(bundle["events"])
    for kind in kinds:
        out += [*_doc(bundle["events"][kind]),
                f"export interface {kind}Data {_object(bundle['events'][kind], '')}", ""]
    out += ["/** The data of a durable event, by its kind. */", "export interface EventData {"]
    out += [f"  {kind}: {kind}Data;" for kind in kinds]
    out += ["}", ""]
    return "\n".join(out)
