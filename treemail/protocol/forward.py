"""Values of a later protocol: an enum-valued view field decodes to ``Unknown`` when its value
is one this protocol does not list.

A later protocol may add an enum value (a session state, a mail mode) as an additive change:
clients must tolerate values they do not know. A raw-JSON client sees a string it does not
recognise; a Python client decodes each view field into its enum, and an unlisted value would
make the whole answer undecodable. So each such field is typed ``SomeEnum | Unknown``: mypy
makes every reader handle the value it cannot name (show its text, or treat it as "other"),
and ``tolerant`` rewrites an unlisted value into ``Unknown``'s shape before decoding.

The daemon never sends ``Unknown`` (it builds views from the core's enums), and the schema
bundle lists the enum alone (``without_unknown``): on the wire the field is the enum's text,
as it always was.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import msgspec
from msgspec import inspect

__all__ = ["Unknown", "decoded", "tolerant", "without_unknown"]


class Unknown(msgspec.Struct, frozen=True):
    """An enum value this protocol does not list (a later protocol's): ``value`` is its text
    as the daemon sent it."""

    value: str

    def __str__(self) -> str:
        return self.value


_UNKNOWN_REF = f"#/$defs/{Unknown.__name__}"
T = TypeVar("T")


def decoded(kind: type[T], raw: Any) -> T:
    """``raw`` decoded into ``kind``, a value of a later protocol as ``Unknown``: decoded as
    it is first (the usual answer, at no extra cost), then again made ``tolerant`` when that
    fails; ``msgspec.ValidationError`` when it still does not fit."""
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError:
        return msgspec.convert(tolerant(kind, raw), kind)


def tolerant(kind: Any, raw: Any) -> Any:
    """``raw`` (JSON values) with each enum-valued field's unlisted value rewritten as
    ``Unknown``'s shape, where ``kind`` (a wire type) allows an ``Unknown`` there; anything
    else is left for the decoder to judge."""
    return _walk(_info(kind), raw)


@functools.cache
def _info(kind: Any) -> inspect.Type:
    return inspect.type_info(kind)


def _walk(info: inspect.Type, raw: Any) -> Any:
    if isinstance(info, inspect.StructType) and isinstance(raw, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        return {key: _walk(fields[key], value) if key in fields else value
                for key, value in raw.items()}
    if isinstance(info, inspect.ListType) and isinstance(raw, list):
        return [_walk(info.item_type, item) for item in raw]
    if isinstance(info, inspect.UnionType):
        return _union(info, raw)
    return raw


def _union(info: inspect.UnionType, raw: Any) -> Any:
    enums = [t.cls for t in info.types if isinstance(t, inspect.EnumType)]
    open_ = any(isinstance(t, inspect.StructType) and t.cls is Unknown for t in info.types)
    if open_ and isinstance(raw, str):
        listed = {member.value for cls in enums for member in cls}
        return raw if raw in listed else {"value": raw}
    structs = [t for t in info.types if isinstance(t, inspect.StructType) and t.cls is not Unknown]
    return _walk(structs[0], raw) if len(structs) == 1 else raw


def without_unknown(schema: Any) -> Any:
    """A schema (or bundle) as the wire has it: each ``X | Unknown`` is ``X`` alone, and
    ``Unknown``'s def is gone, since no daemon sends one."""
    if isinstance(schema, list):
        return [without_unknown(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    found = {key: without_unknown(value) for key, value in schema.items()
             if key != Unknown.__name__}
    choices = found.get("anyOf")
    if isinstance(choices, list) and {"$ref": _UNKNOWN_REF} in choices:
        rest = [c for c in choices if c != {"$ref": _UNKNOWN_REF}]
        del found["anyOf"]
        found = {**found, **rest[0]} if len(rest) == 1 else {**found, "anyOf": rest}
    return found
