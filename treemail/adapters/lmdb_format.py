"""The on-disk format of an LMDB store: a marker in its ``meta`` database, and the one upgrade.

Format 2 ends every value in a checksum (see ``codec``). Stores written before it carry no
marker; a writer upgrades such a store in place, in one transaction, by appending the checksum
to every value it holds (the payloads are already what format 2 stores). A reader never
writes, so it refuses an old store and says how to upgrade it. A marker naming any other
format (a newer treemail's) is refused, never guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import lmdb

from treemail.adapters.codec import encode
from treemail.core.errors import StorageError, StoreFormatUnknown
from treemail.core.keys import Table

__all__ = ["FORMAT", "META_DB", "settle_format"]

META_DB = b"meta"
FORMAT_KEY = b"format"
FORMAT = b"treemail-store 2"
_Txn: TypeAlias = "lmdb.Transaction[bytes]"


def settle_format(env: lmdb.Environment, dbs: Mapping[Table, Any], meta: Any,
                  directory: Path, *, write: bool, max_map_size: int) -> None:
    """Check the store's format marker; as a writer, mark a new store and upgrade an old one."""
    while True:
        try:
            with env.begin(write=write) as txn:
                _settle(txn, dbs, meta, directory, write=write)
            return
        except lmdb.MapFullError:  # the upgrade outgrew the map: grow it and start over
            size = env.info()["map_size"]
            if size >= max_map_size:
                raise StorageError(f"upgrading the store at {str(directory)!r} needs more "
                                   f"than max_map_size ({max_map_size} bytes)") from None
            env.set_mapsize(min(size * 2, max_map_size))


def _settle(txn: _Txn, dbs: Mapping[Table, Any], meta: Any, directory: Path, *,
            write: bool) -> None:
    marker = None if meta is None else txn.get(FORMAT_KEY, db=meta)
    if marker == FORMAT:
        return
    if marker is not None:
        raise StoreFormatUnknown(
            f"the store at {str(directory)!r} has format {bytes(marker)!r}; this treemail "
            f"reads {FORMAT!r} only: use the treemail that wrote it", path=str(directory))
    legacy = any(txn.stat(db)["entries"] for db in dbs.values())
    if not write:
        if legacy:
            raise StoreFormatUnknown(
                f"the store at {str(directory)!r} predates record checksums; open it once "
                "for writing (any treemail command that runs it) to upgrade it in place",
                path=str(directory))
        return
    if legacy:
        for db in dbs.values():
            rows = [(bytes(key), bytes(raw)) for key, raw in txn.cursor(db=db)]
            for key, raw in rows:
                txn.put(key, encode(raw, key), db=db)  # raw bytes: only the checksum is added
    txn.put(FORMAT_KEY, FORMAT, db=meta)
