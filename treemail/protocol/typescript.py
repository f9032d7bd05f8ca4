"""TypeScript for the schema bundle of ``bindings.py``: one ``protocol.ts`` that ``tsc --strict``
checks.

Pure, and derived only from the bundle, so the TypeScript cannot say other than the schema.
An object def is an interface; an enum, a union or a const def is a type alias of
string literals or of the union's members; a params type with ``oneOf`` alternatives of
required fields is the fields it always has joined with a union of the alternatives, each
giving one field and leaving the others null or out. It also holds what a schema holds no
value for: ``PROTOCOL_VERSION`` and the wire error codes as runtime constants, and the
frames typed per method (``Request<"session.get">``).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["typescript"]

# The frames, typed by the method tables: what a client writes and reads per method.
_TYPED_FRAMES = '''\
/** A request frame of method M, its params typed. */
export type Request<M extends keyof Methods = keyof Methods> = {
  [K in M]: { jsonrpc: "2.0"; id: number | string; method: K; params: Methods[K]["params"] };
}[M];

/** The response to a request of method M, its result typed. */
export interface Response<M extends keyof Methods> {
  jsonrpc: "2.0";
  id: number | string;
  result: Methods[M]["result"];
}

/** A server notification of method M, its params typed. */
export type Notification<M extends keyof Notifications = keyof Notifications> = {
  [K in M]: { jsonrpc: "2.0"; method: K; params: Notifications[K]["params"] };
}[M];

/** A server request of method M (answered by plugins), its params typed. */
export type ServerRequest<M extends keyof ServerRequests = keyof ServerRequests> = {
  [K in M]: { jsonrpc: "2.0"; id: number | string; method: K;
              params: ServerRequests[K]["params"] };
}[M];
'''


def _ts(schema: Any) -> str:
    """A TypeScript type for a JSON Schema, in the subset the bundle uses."""
    if not isinstance(schema, dict) or not schema:
        return "unknown"
    if "$ref" in schema:
        ref = str(schema["$ref"])
        name = ref.rsplit("/", 1)[-1]
        return f"{name}Data" if ref.startswith("#/events/") else name
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
        return f"Array<{_ts(schema.get('items'))}>"
    if kind == "object":
        if "properties" in schema:
            return _object(schema["properties"], set(schema.get("required", ())))
        extra = schema.get("additionalProperties")
        return f"Record<string, {_ts(extra) if isinstance(extra, dict) else 'unknown'}>"
    simple = {"string": "string", "integer": "number", "number": "number",
              "boolean": "boolean", "null": "null"}
    return simple.get(str(kind), "unknown")


def _object(properties: dict[str, Any], required: set[str]) -> str:
    lines = ["{"]
    for name, prop in properties.items():
        optional = "" if name in required else "?"
        lines.append(f"  {name}{optional}: {_ts(prop)};")
    return "\n".join([*lines, "}"])


def _not_null(schema: dict[str, Any]) -> str:
    options = schema.get("anyOf", [schema])
    return " | ".join(_ts(o) for o in options if o.get("type") != "null") or "never"


def _alternatives(schema: dict[str, Any]) -> str:
    """``{always} & ({a: A; b?: null} | {a?: null; b: B})``: exactly one field of a group."""
    properties, required = schema["properties"], set(schema.get("required", ()))
    group = [alt["required"][0] for alt in schema["oneOf"]]
    always = {k: v for k, v in properties.items() if k not in group}
    options = [" ".join(["{", *(f"{g}: {_not_null(properties[g])};" if g == given
                                 else f"{g}?: null;" for g in group), "}"])
               for given in group]
    return f"{_object(always, required)} & ({' | '.join(options)})"


def _doc(schema: dict[str, Any]) -> list[str]:
    text = " ".join(str(schema.get("description", "")).split()).replace("*/", "* /")
    return [f"/** {text} */"] if text else []


def _def(name: str, schema: dict[str, Any]) -> list[str]:
    if schema.get("type") == "object" and "oneOf" in schema:
        return [*_doc(schema), f"export type {name} = {_alternatives(schema)};", ""]
    if schema.get("type") == "object":
        required = set(schema.get("required", ()))
        return [*_doc(schema), f"export interface {name} "
                f"{_object(schema.get('properties', {}), required)}", ""]
    members = [_ts(m) for m in schema.get("oneOf", ())] or [
        json.dumps(v) for v in schema.get("enum", ())]
    if len(members) > 6:  # a long union: one member a line
        lines = "".join(f"\n  | {member}" for member in members)
        return [*_doc(schema), f"export type {name} ={lines};", ""]
    return [*_doc(schema), f"export type {name} = {_ts(schema)};", ""]


def _table_type(name: str, table: dict[str, Any]) -> list[str]:
    lines = [f"export interface {name} {{"]
    for method, entry in table.items():
        lines.append(f"  {json.dumps(method)}: {{ params: {_ts(entry['params'])}; "
                     f"result: {_ts(entry['result'])} }};")
    return [*lines, "}", ""]


def typescript(bundle: dict[str, Any], source: str) -> str:
    wire_errors = {int(code): text for code, text in bundle["wire_errors"].items()}
    out = [f"// Generated from {source} by `just write-bindings`; do not edit.", "",
           "/** The protocol version this file describes: send it in `initialize`. */",
           f"export const PROTOCOL_VERSION = {bundle['protocol_version']} as const;", "",
           "/** The JSON-RPC `error.code` of each family of treemail errors. */",
           f"export const WIRE_ERRORS = {json.dumps(wire_errors, indent=2)} as const;", ""]
    for name, schema in bundle["$defs"].items():
        out += _def(name, schema)
    out += _table_type("Methods", bundle["methods"])
    out += _table_type("Notifications", bundle["notifications"])
    out += _table_type("ServerRequests", bundle["server_requests"])
    out += [_TYPED_FRAMES]
    kinds = list(bundle["events"])
    for kind in kinds:
        out += _def(f"{kind}Data", bundle["events"][kind])
    out += ["/** The data of a durable event, by its kind. */", "export interface EventData {"]
    out += [f"  {kind}: {kind}Data;" for kind in kinds]
    out += ["}", ""]
    return "\n".join(out)
