"""The stored shape of a frozen attrs record: encode to plain JSON values, decode, JSON Schema.

One ``Shape`` per class, built once from its fields and type hints, drives all three, so the
schema published in ``spec/`` is exactly what ``encode`` writes and ``decode`` accepts.
Decoding is strict and total: a value of the wrong type (``True`` for an int, ``5`` for a
string), an unknown key or a missing required key raises ``Unfit``, nothing else, and
nothing is coerced. A field's ``metadata`` may rename its key (``KEY``) or give its own
``Codec`` (``CODEC``); a class may define ``_assemble(values)`` to finish decoded values
before construction (the event log uses that for the owner variant of mail).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["CODEC", "KEY", "Codec", "Shape", "Unfit", "enum_codec", "shape"]

KEY = "treemail.key"  # field metadata: the stored key, when it differs from the field's name
CODEC = "treemail.codec"  # field metadata: a Codec of the field's own


class Unfit(Exception):
    """Stored data that does not fit the record's shape; the message says where."""


@attrs.frozen
class Codec:
    decode: Callable[[object], Any]
    encode: Callable[[Any], object]
    schema: Mapping[str, object]


def _same(value: object) -> object:
    return value


def _exact(kind: type, name: str) -> Codec:
    def decode(value: object) -> object:
        # ``type(...) is``, not isinstance: True must not pass for an int.
        if type(value) is not kind:
            raise Unfit(f"expected {name}, got {type(value).__name__}")
        return value

    return Codec(decode, _same, {"type": name})


_SCALARS: Mapping[object, str] = {str: "string", int: "integer", bool: "boolean",
                                  type(None): "null"}


def enum_codec(cls: type[enum.StrEnum]) -> Codec:
    """A StrEnum, stored by value."""
    values = {member.value: member for member in cls}

    def decode(value: object) -> object:
        if not isinstance(value, str) or value not in values:
            raise Unfit(f"expected one of {sorted(values)}, got {value!r}")
        return values[value]

    return Codec(decode, lambda member: member.value, {"type": "string", "enum": list(values)})


def _union(options: list[Codec]) -> Codec:
    def decode(value: object) -> object:
        for option in options:
            try:
                return option.decode(value)
            except Unfit:
                continue
        raise Unfit(f"{value!r} fits none of the field's types")

    kinds = [o.schema.get("type") for o in options]
    if all(isinstance(o.schema.get("type"), str) and len(o.schema) == 1 for o in options):
        schema: Mapping[str, object] = {"type": kinds}
    else:
        schema = {"anyOf": [o.schema for o in options]}
    # Only ``X | None`` unions are stored: None stays None, the rest is X's.
    inner = next(o for o in options if o.schema.get("type") != "null")
    return Codec(decode, lambda v: None if v is None else inner.encode(v), schema)


def _array(item: Codec) -> Codec:
    def decode(value: object) -> object:
        if not isinstance(value, list | tuple):
            raise Unfit(f"expected array, got {type(value).__name__}")
        return tuple(item.decode(v) for v in value)

    return Codec(decode, lambda values: [item.encode(v) for v in values],
                 {"type": "array", "items": item.schema})


def _strings() -> Codec:
    """A JSON object of string values (a tool result's fields)."""
    def decode(value: object) -> object:
        if not isinstance(value, Mapping) or not all(
                type(k) is str and type(v) is str for k, v in value.items()):
            raise Unfit("expected an object of strings")
        return dict(value)

    return Codec(decode, dict, {"type": "object", "additionalProperties": {"type": "string"}})


def _codec(hint: Any) -> Codec:
    if hint in _SCALARS:
        return _exact(hint, _SCALARS[hint])
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return enum_codec(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _union([_codec(arg) for arg in typing.get_args(hint)])
    if origin is tuple:
        return _array(_codec(typing.get_args(hint)[0]))
    if origin in (Mapping, dict) and typing.get_args(hint) == (str, str):
        return _strings()
    if attrs.has(hint):
        nested = shape(hint)
        return Codec(nested.decode, nested.encode, nested.schema)
    raise TypeError(f"shapes: no codec for field type {hint!r}")


@attrs.frozen
class _Field:
    name: str
    key: str
    codec: Codec
    default: object  # attrs.NOTHING when required


class Shape:
    """How one attrs class is stored: its fields, with their keys, codecs and defaults."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        hints = typing.get_type_hints(cls)
        self.fields = [_field(f, hints[f.name]) for f in attrs.fields(cls)]
        self.keys = frozenset(f.key for f in self.fields)
        self.assemble: Callable[[dict[str, Any]], None] | None = getattr(cls, "_assemble", None)
        self.schema: Mapping[str, object] = {
            "type": "object",
            "properties": {f.key: f.codec.schema for f in self.fields},
            "required": [f.key for f in self.fields if f.default is attrs.NOTHING],
            "additionalProperties": False,
        }

    def encode(self, value: object) -> dict[str, object]:
        return {f.key: f.codec.encode(getattr(value, f.name)) for f in self.fields}

    def decode(self, data: object) -> Any:
        if not isinstance(data, Mapping):
            raise Unfit(f"expected an object, got {type(data).__name__}")
        unknown = set(data) - self.keys
        if unknown:
            raise Unfit(f"unknown field(s) {sorted(map(str, unknown))}")
        values = {f.name: _value(f, data) for f in self.fields}
        if self.assemble is not None:
            self.assemble(values)
        try:
            return self.cls(**values)
        except (TypeError, ValueError) as exc:  # a validator refused the combination
            raise Unfit(str(exc)) from exc


def _field(field: attrs.Attribute[Any], hint: Any) -> _Field:
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs types it loosely
        default = default.factory()
    codec = field.metadata.get(CODEC) or _codec(hint)
    return _Field(field.name, field.metadata.get(KEY, field.name), codec, default)


def _value(field: _Field, data: Mapping[str, object]) -> object:
    if field.key in data:
        return field.codec.decode(data[field.key])
    if field.default is attrs.NOTHING:
        raise Unfit(f"missing field {field.key!r}")
    return field.default


_SHAPES: dict[type, Shape] = {}


def shape(cls: type) -> Shape:
    """The (cached) shape of attrs class ``cls``."""
    found = _SHAPES.get(cls)
    if found is None:
        found = _SHAPES[cls] = Shape(cls)
    return found
