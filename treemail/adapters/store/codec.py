"""Records to bytes and back: attrs records as compact JSON through msgspec, then a 4-byte
checksum.

msgspec encodes and decodes attrs classes natively, so the records stay the domain types and
no converter sits between them and the bytes; it is 10 to 30 times faster than the standard
library's json plus a converter on our records (`just bench`). The JSON is the same document
the earlier json-plus-cattrs codec wrote (one object per record, fields by name, enums by
value; only the key order differs, which JSON ignores), so a store written by it reads as it
is: the codec change needed no format change (``lmdb_format`` has the ones that did).

JSON keeps stored records readable with ``mdb_dump`` and free of pickle's code execution.
Decoding is strict (a string field holding ``5`` is an error, not ``"5"``; ``true`` is not an
int), so a damaged record is reported instead of being quietly coerced; every decoding
failure is a ``StoreDamaged`` naming the database and key.

The checksum: LMDB keeps none, so a flipped byte in a value would be read back as a different
body. Every stored value ends in the big-endian CRC-32 of its key and payload (``zlib.crc32``:
in the standard library, in C, and it detects every burst of up to 32 flipped bits, which is
what a damaged sector or a stray write looks like; no attacker is in the threat model, so a
cryptographic hash would buy nothing). The key is covered too, so a record whose key bytes
were damaged fails where it is read instead of answering under another key. A mismatch is a
``StoreDamaged`` naming the database and key.
"""

from __future__ import annotations

import zlib
from typing import Any, TypeVar

import msgspec

from treemail.core.errors import StorageError, StoreDamaged

__all__ = ["CHECKSUM_BYTES", "decode", "encode", "encode_rows", "payload"]

T = TypeVar("T")

CHECKSUM_BYTES = 4

_ENCODER = msgspec.json.Encoder()
_encode = _ENCODER.encode
_encode_lines = _ENCODER.encode_lines
_crc32 = zlib.crc32
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def encode(value: object, key: bytes) -> bytes:
    """A record (or a plain str / int) as compact UTF-8 JSON, or bytes (a raw key) as they
    are, followed by the checksum of ``key`` and that payload."""
    body = value if type(value) is bytes else _encode(value)
    # CRC-32 runs over a stream: the CRC of key + body is that of body continued from key's,
    # the checksum every format since 2 stores, in one call instead of two.
    return body + zlib.crc32(key + body).to_bytes(CHECKSUM_BYTES, "big")


def encode_rows(
        rows: list[tuple[bytes, bytes, object]]) -> list[tuple[bytes, bytes | None]]:
    """``(where, encode(value, key))`` of each ``(where, key, value)``, None for a value of
    None (a delete): a flush's rows encoded in one call, its records in one encoding, each
    row costing its checksum and no call of its own."""
    if not rows:
        return []
    wheres, keys, values = zip(*rows, strict=True)
    # Every value in one call of the encoder, as JSON lines, the same documents ``encode``
    # writes: compact JSON writes a newline inside a string as an escape, so the lines are
    # the values' documents in order. A raw value's line (bytes, as base64) and a delete's
    # (``null``) go unused. A send's five records were five encoder calls; now two (the
    # encoding and its split, whose last piece is the nothing after the last newline).
    lines = _encode_lines(values).split(b"\n")[:-1]
    # Strict: were a document ever to hold a newline, the line count would be off and the
    # flush would fail here, not store one row's document under another's key.
    return [(where, None if value is None else
             (body := value if type(value) is bytes else line)
             + _crc32(key + body).to_bytes(CHECKSUM_BYTES, "big"))
            for where, key, value, line in zip(wheres, keys, values, lines, strict=True)]


def payload(raw: bytes, *, db: str, key: bytes) -> bytes:
    """The payload of a stored value once its checksum holds; ``StoreDamaged`` if not."""
    body, stored = raw[:-CHECKSUM_BYTES], raw[-CHECKSUM_BYTES:]
    expected = zlib.crc32(key + body).to_bytes(CHECKSUM_BYTES, "big")
    if len(raw) < CHECKSUM_BYTES or stored != expected:
        raise StoreDamaged(
            f"checksum mismatch in database {str(db)!r} at key {bytes(key)!r}: the record is "
            "damaged; restore the store from a copy (treemail verify lists every damaged record)",
            db=db, key=bytes(key))
    return bytes(body)


def decode(kind: type[T], raw: bytes, *, db: str, key: bytes) -> T:
    """The ``kind`` stored as ``raw`` at ``key`` of ``db``; ``StorageError`` if it is not one."""
    body = payload(raw, db=db, key=key)
    if kind is bytes:
        return body  # type: ignore[return-value]  # T is bytes here
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        value: T = decoder.decode(body)
    except msgspec.DecodeError as exc:  # bad UTF-8 or JSON, a wrong type, a bad enum value
        raise _undecodable(kind, db, key, str(exc)) from exc
    return value


def _undecodable(kind: type[Any], db: str, key: bytes, reason: str) -> StorageError:
    return StoreDamaged(
        f"cannot decode a {kind.__name__} in database {str(db)!r} at key {key!r}: {reason}",
        db=db,
        key=key,
    )
