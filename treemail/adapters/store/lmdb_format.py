"""The on-disk format of an LMDB store: a marker in its ``meta`` database, and the upgrades.

Format 2 ends every value in a checksum (see ``codec``). Format 3 keeps each session's last
event seq and its tallied counters (``keys.TALLIED``) in one ``tally`` row per session,
where format 2 had a ``last_seq`` table and those counters in ``counters``. Format 4 keeps
every table in one database, ``rows``, in the key space of ``keys.stored_key`` (a send's
rows are neighbours there, so a commit writes fewer pages), where format 3 had a database
per table; the values, checksums included, are the same bytes.

A writer upgrades an older store in place, in one transaction, so a failed upgrade leaves it
as it was: a store without a marker (before checksums) gets its checksums first, then a
format 2 store has its ``last_seq`` rows and tallied counters moved into tally rows (and the
``last_seq`` table is dropped), then a format 3 store has every table's rows moved into
``rows`` (and the per-table databases dropped). A reader never writes, so it refuses an
older store and says how to upgrade it. A marker naming any other format (a newer
treemail's) is refused, never guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

import lmdb

from treemail.adapters.store.codec import decode, encode
from treemail.core import keys
from treemail.core.errors import StorageError, StoreDamaged, StoreFormatUnknown
from treemail.core.keys import Table, Tally

__all__ = ["FORMAT", "MAX_DBS", "META_DB", "ROWS_DB", "check_readable", "settle_format"]

META_DB = b"meta"
ROWS_DB = b"rows"  # every table, in the key space of ``keys.stored_key``
FORMAT_KEY = b"format"
FORMAT = b"treemail-store 4"
_TABLE_PER_DB = b"treemail-store 3"  # a database per table
_TALLY_LESS = b"treemail-store 2"  # last_seq and every counter in their own rows
_LAST_SEQ_DB = b"last_seq"  # format 2's table, dropped by the upgrade
# The databases an environment must have room for: rows and meta, and during an upgrade
# every table's own database of format 3 and the old last_seq.
MAX_DBS = 2 + len(Table) + 1
_Txn: TypeAlias = "lmdb.Transaction[bytes]"


def settle_format(env: lmdb.Environment, db: Any, meta: Any, directory: Path, *,
                  max_map_size: int) -> None:
    """As the writer: check the store's format marker, mark a new store, upgrade an old one
    (``db`` is the ``rows`` database)."""
    while True:
        try:
            with env.begin(write=True) as txn:
                _settle(env, txn, db, meta, directory)
            return
        except lmdb.MapFullError:  # the upgrade outgrew the map: grow it and start over
            size = env.info()["map_size"]
            if size >= max_map_size:
                raise StorageError(f"upgrading the store at {str(directory)!r} needs more "
                                   f"than max_map_size ({max_map_size} bytes)") from None
            env.set_mapsize(min(size * 2, max_map_size))


def check_readable(env: lmdb.Environment, directory: Path) -> None:
    """As a reader, before opening the tables: refuse any store but the current format, and
    say how to upgrade an older one (a reader never writes)."""
    # Handles opened outside a transaction (py-lmdb's own read txn) outlive it, as the
    # reader's table handles must.
    meta = _existing(env, META_DB)
    rows = _existing(env, ROWS_DB)
    # An older store's tables, each its own database: even empty, they are a treemail store
    # from before the marker (a writer opens it as a new one), not a foreign LMDB file.
    older = [db for name in [*_OLD_TABLES, _LAST_SEQ_DB] if (db := _existing(env, name))]
    with env.begin() as txn:
        found = None if meta is None else txn.get(FORMAT_KEY, db=meta)
        marker = None if found is None else bytes(found)
        if marker == FORMAT:
            return
        _refuse_unknown(marker, directory)
        if marker is None and rows and txn.stat(rows)["entries"]:
            raise _unmarked(directory)
        if marker is None and not older:
            # An empty directory LMDB made (opening the tables says what it lacks), or a
            # writer's empty rows stopped before its marker (an empty store).
            return
    what = "predates record checksums" if marker is None else f"has format {marker!r}"
    raise StoreFormatUnknown(
        f"the store at {str(directory)!r} {what}, older than this treemail's {FORMAT!r}; "
        "open it once for writing (any treemail command that runs it) to upgrade it in place",
        path=str(directory))


def _existing(env: lmdb.Environment, name: bytes, txn: _Txn | None = None) -> Any:
    """The database ``name`` if the store has it (opened in ``txn``, if given), else None."""
    try:
        return env.open_db(name, txn=txn, create=False)
    except lmdb.NotFoundError:
        return None


# Format 3's databases, one per table, named after it.
_OLD_TABLES = [table.encode() for table in Table]


def _unmarked(directory: Path) -> StoreDamaged:
    # Only a marked store's writer fills ``rows`` (an upgrade marks it in the transaction
    # that fills them): rows without a marker are a store whose marker was lost, not an
    # older store to upgrade.
    return StoreDamaged(
        f"the store at {str(directory)!r} holds rows but no format marker: its meta database "
        "is damaged; restore the store from a copy", path=str(directory))


def _refuse_unknown(marker: bytes | None, directory: Path) -> None:
    if marker not in (None, FORMAT, _TABLE_PER_DB, _TALLY_LESS):
        raise StoreFormatUnknown(
            f"the store at {str(directory)!r} has format {marker!r}; this treemail "
            f"reads {FORMAT!r} (and upgrades older ones): use the treemail that wrote it",
            path=str(directory))


def _settle(env: lmdb.Environment, txn: _Txn, db: Any, meta: Any, directory: Path) -> None:
    marker = txn.get(FORMAT_KEY, db=meta)
    marker = None if marker is None else bytes(marker)
    if marker == FORMAT:
        return
    _refuse_unknown(marker, directory)
    # An older format's tables, each its own database (LMDB made none of them for a new
    # store: opening one only where it exists creates nothing).
    found = {table: _existing(env, table.encode(), txn) for table in Table}
    dbs = {table: handle for table, handle in found.items() if handle is not None}
    if marker is None:
        if txn.stat(db)["entries"]:
            raise _unmarked(directory)
        if not any(txn.stat(handle)["entries"] for handle in dbs.values()):
            txn.put(FORMAT_KEY, FORMAT, db=meta)  # a new store: no older table kept
            _drop(txn, dbs)
            if (last_seq := _existing(env, _LAST_SEQ_DB, txn)) is not None:
                txn.drop(last_seq, delete=True)
            return
        _add_checksums(env, txn, dbs)
    if marker in (None, _TALLY_LESS):
        dbs[Table.TALLY] = env.open_db(Table.TALLY.encode(), txn=txn)  # format 2 had none
        _gather_tallies(env, txn, dbs)
    _into_one_space(txn, dbs, db)
    txn.put(FORMAT_KEY, FORMAT, db=meta)


def _into_one_space(txn: _Txn, dbs: Mapping[Table, Any], db: Any) -> None:
    """Format 3 to 4: every table's rows into ``rows``, the same bytes under its stored key
    (the checksum covers the table's key, which the row keeps), the old databases dropped."""
    for table, old in dbs.items():
        for key, raw in txn.cursor(db=old):
            txn.put(keys.stored_key(table, bytes(key)), bytes(raw), db=db)
    _drop(txn, dbs)


def _drop(txn: _Txn, dbs: Mapping[Table, Any]) -> None:
    for old in dbs.values():
        txn.drop(old, delete=True)


def _add_checksums(env: lmdb.Environment, txn: _Txn, dbs: Mapping[Table, Any]) -> None:
    """Before format 2: the payloads are already what it stores; only the checksum is added."""
    old = _existing(env, _LAST_SEQ_DB, txn)
    for db in [*dbs.values(), *([old] if old is not None else [])]:
        rows = [(bytes(key), bytes(raw)) for key, raw in txn.cursor(db=db)]
        for key, raw in rows:
            txn.put(key, encode(raw, key), db=db)


def _gather_tallies(env: lmdb.Environment, txn: _Txn, dbs: Mapping[Table, Any]) -> None:
    # (on format 2's own databases, before they move into the one key space)
    """Format 2 to 3: last_seq rows and tallied counters become each session's tally row."""
    last: dict[bytes, int] = {}
    counters: dict[bytes, dict[str, int]] = {}
    old = _existing(env, _LAST_SEQ_DB, txn)
    if old is not None:
        for key, raw in txn.cursor(db=old):
            last[bytes(key)] = decode(int, raw, db=_LAST_SEQ_DB.decode(), key=bytes(key))
    moved = []
    for key, raw in txn.cursor(db=dbs[Table.COUNTERS]):
        place = keys.counter_place(bytes(key).decode())
        if place is not None:
            value = decode(int, raw, db=Table.COUNTERS, key=bytes(key))
            counters.setdefault(place.owner, {})[place.slot] = value
            moved.append(bytes(key))
    for key in moved:
        txn.delete(key, db=dbs[Table.COUNTERS])
    for owner in last.keys() | counters.keys():
        tally = Tally(last.get(owner, 0), counters.get(owner, {}))
        txn.put(owner, encode(tally, owner), db=dbs[Table.TALLY])
    if old is not None:
        txn.drop(old, delete=True)
