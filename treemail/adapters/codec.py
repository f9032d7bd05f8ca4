"""Records to bytes and back: attrs records through one cattrs converter, then compact JSON,
then a 4-byte checksum.

JSON keeps stored records readable with ``mdb_dump`` and free of pickle's code execution.
Enums are stored by value. Decoding is strict (a string field holding ``5`` is an error, not
``"5"``), so a damaged record is reported instead of being quietly coerced; every decoding
failure is a ``StorageError`` naming the database and key.

The checksum: LMDB keeps none, so a flipped byte in a value would be read back as a different
body. Every stored value ends in the big-endian CRC-32 of its key and payload (``zlib.crc32``:
in the standard library, in C, and it detects every burst of up to 32 flipped bits, which is
what a damaged sector or a stray write looks like; no attacker is in the threat model, so a
cryptographic hash would buy nothing). The key is covered too, so a record whose key bytes
were damaged fails where it is read instead of answering under another key. A mismatch is a
``StoreDamaged`` naming the database and key.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, TypeVar

import cattrs

from treemail.core.errors import StorageError, StoreDamaged
from treemail.core.records import Message, Run, SendResult, Session

__all__ = ["CHECKSUM_BYTES", "decode", "encode", "payload"]

T = TypeVar("T")

_converter = cattrs.Converter()

# Event.data is ``Mapping[str, object]``: its values are kept as JSON gave them.
_converter.register_structure_hook_func(lambda t: t is object, lambda value, _: value)


def _exact(kind: type[Any]) -> None:
    def structure(value: object, target: type[Any]) -> object:
        # ``type(...) is`` rather than isinstance: True must not pass for an int.
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        # The hook also serves subclasses such as the StrEnums, which must be rebuilt.
        return value if target is kind else target(value)

    _converter.register_structure_hook(kind, structure)


for _kind in (str, int, bool):
    _exact(_kind)

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


CHECKSUM_BYTES = 4


def encode(value: object, key: bytes) -> bytes:
    """A record (or a plain str / int) as compact UTF-8 JSON, or bytes (a raw key) as they
    are, followed by the checksum of ``key`` and that payload."""
    body = value if type(value) is bytes else _dumps(_converter.unstructure(value)).encode()
    return body + zlib.crc32(body, zlib.crc32(key)).to_bytes(CHECKSUM_BYTES, "big")


def payload(raw: bytes, *, db: str, key: bytes) -> bytes:
    """The payload of a stored value once its checksum holds; ``StoreDamaged`` if not."""
    body, stored = raw[:-CHECKSUM_BYTES], raw[-CHECKSUM_BYTES:]
    expected = zlib.crc32(body, zlib.crc32(key)).to_bytes(CHECKSUM_BYTES, "big")
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
    if kind in _SHAREABLE:
        try:
            return _decode_shared(kind, body)
        except cattrs.BaseValidationError as exc:
            raise _undecodable(kind, db, key, "; ".join(cattrs.transform_error(exc))) from exc
        except (ValueError, TypeError) as exc:
            raise _undecodable(kind, db, key, str(exc)) from exc
    try:
        return _converter.structure(json.loads(body), kind)
    except cattrs.BaseValidationError as exc:
        reason = "; ".join(cattrs.transform_error(exc))
        raise _undecodable(kind, db, key, reason) from exc
    except (ValueError, TypeError) as exc:  # bad UTF-8 or JSON, or a wrong top-level type
        raise _undecodable(kind, db, key, str(exc)) from exc


# Records whose every field is immutable: one decoded instance may be shared by every read of
# the same bytes. A send reads the same session and run records several times; decoding each
# once is most of the saving. Records holding a dict (Event, Approval) are never shared.
_SHAREABLE: frozenset[type[Any]] = frozenset({str, int, Session, Run, Message, SendResult})


_shared: dict[tuple[type[Any], bytes], Any] = {}
_SHARED_LIMIT = 512


def _decode_shared(kind: type[T], raw: bytes) -> T:
    found = _shared.get((kind, raw))
    if found is None:
        if len(_shared) >= _SHARED_LIMIT:
            _shared.clear()  # cheaper than LRU bookkeeping; hot records come straight back
        found = _shared[(kind, raw)] = _converter.structure(json.loads(raw), kind)
    value: T = found
    return value


def _undecodable(kind: type[Any], db: str, key: bytes, reason: str) -> StorageError:
    return StoreDamaged(
        f"cannot decode a {kind.__name__} in database {str(db)!r} at key {key!r}: {reason}",
        db=db,
        key=key,
    )
