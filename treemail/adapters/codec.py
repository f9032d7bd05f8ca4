"""Records to bytes and back: attrs records through one cattrs converter, then compact JSON.

JSON keeps stored records readable with ``mdb_dump`` and free of pickle's code execution.
Enums are stored by value. Decoding is strict (a string field holding ``5`` is an error, not
``"5"``), so a damaged record is reported instead of being quietly coerced; every decoding
failure is a ``StorageError`` naming the database and key.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs

from treemail.core.errors import StorageError
from treemail.core.records import Message, Run, SendResult, Session

__all__ = ["decode", "encode"]

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


def encode(value: object) -> bytes:
    """A record (or a plain str / int) as compact UTF-8 JSON; bytes (a raw key) as they are."""
    if type(value) is bytes:
        return value
    return _dumps(_converter.unstructure(value)).encode()


def decode(kind: type[T], raw: bytes, *, db: str, key: bytes) -> T:
    """The ``kind`` stored as ``raw`` at ``key`` of ``db``; ``StorageError`` if it is not one."""
    if kind is bytes:
        return bytes(raw)  # type: ignore[return-value]  # T is bytes here
    if kind in _SHAREABLE:
        try:
            return _decode_shared(kind, bytes(raw))
        except cattrs.BaseValidationError as exc:
            raise _undecodable(kind, db, key, "; ".join(cattrs.transform_error(exc))) from exc
        except (ValueError, TypeError) as exc:
            raise _undecodable(kind, db, key, str(exc)) from exc
    try:
        return _converter.structure(json.loads(raw), kind)
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
    return StorageError(
        f"cannot decode a {kind.__name__} in database {db!r} at key {key!r}: {reason}",
        db=db,
        key=key,
    )
