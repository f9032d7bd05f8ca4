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
from collections.abc import Callable
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
    fix = _fixer(kind)
    return raw if fix is None else fix(raw)


_Fix = Callable[[Any], Any]


@functools.cache
def _fixer(kind: Any) -> _Fix | None:
    """How to rewrite a value of ``kind``, compiled once per type: it visits only the fields
    that can hold an ``Unknown``; None when none can."""
    return _plan(inspect.type_info(kind))


def _plan(info: inspect.Type) -> _Fix | None:
    if isinstance(info, inspect.StructType):
        return _struct(info) if info.cls is not Unknown else None
    if isinstance(info, inspect.ListType):
        item = _plan(info.item_type)
        return None if item is None else (
            lambda raw: [item(x) for x in raw] if isinstance(raw, list) else raw)
    if isinstance(info, inspect.UnionType):
        return _union(info)
    return None


def _struct(info: inspect.StructType) -> _Fix | None:
    fields = {f.encode_name: step for f in info.fields if (step := _plan(f.type)) is not None}
    if not fields:
        return None

    def fix(raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        return {key: fields[key](value) if key in fields else value
                for key, value in raw.items()}

    return fix


def _union(info: inspect.UnionType) -> _Fix | None:
    if any(isinstance(t, inspect.StructType) and t.cls is Unknown for t in info.types):
        listed = frozenset(member.value for t in info.types if isinstance(t, inspect.EnumType)
                           for member in t.cls)
        return lambda raw: {"value": raw} if isinstance(raw, str) and raw not in listed else raw
    structs = [t for t in info.types if isinstance(t, inspect.StructType)]
    return _plan(structs[0]) if len(structs) == 1 else None


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
