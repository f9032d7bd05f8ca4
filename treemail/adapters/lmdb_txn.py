"""An ``LmdbStore`` transaction: the store port's primitives over LMDB, with a row cache
that reads and writes each row once, and savepoints that cost no LMDB transaction unless
they must.

``LmdbTables`` keeps each row the transaction read or wrote, decoded, so that nothing is read
and decoded twice: a send reads its recipient's tally for the guards and then rewrites it.
Writes are kept there too and reach LMDB once per row, encoded, when ``flush`` runs: before a
scan or count of their table (LMDB answers those), when a savepoint opens, and before the
commit. So a row a send changes four times (the tally: the message seq, two guard counters,
the last event seq) is one put. A row appended under a key its table cannot hold yet (the
feed) is counted by ``size`` without a flush.

Savepoints: one opens by flushing what came before it into LMDB, so every row the cache then
holds unflushed is the savepoint's own. Undoing it is forgetting them. Only when a savepoint
must write to LMDB itself (a scan or count of a table it changed, or a savepoint opened
inside it) does it open a nested LMDB transaction, which is then committed into its parent
or aborted with it. A send in a group-commit batch opens none: the nested transaction, which
copies every page it touches, was a fifth of a batched send's cost.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, TypeAlias

import lmdb

from treemail.adapters.codec import decode, encode
from treemail.core.errors import StorageError, StoreFull
from treemail.core.keys import VALUE_KINDS, Table
from treemail.core.store import Indexed, WriteTxn

__all__ = ["LmdbTables", "LmdbTxn", "abort", "disk_full", "failure"]

Txn: TypeAlias = "lmdb.Transaction[bytes]"
Dbs: TypeAlias = "Mapping[Table, lmdb._Database]"

_UNSEEN: Any = object()

# Tables whose rows every send reads and few operations change: the sender and recipient
# sessions and the sending run. Their decoded records are kept across transactions by the
# exact stored bytes, so a row read again unchanged is not checksummed and decoded again,
# while a changed or damaged row (other bytes) is decoded, and checked, afresh. The records
# are frozen, so sharing one between transactions is safe.
_STEADY = frozenset((Table.SESSIONS, Table.RUNS))


@functools.lru_cache(maxsize=4096)
def _decode_steady(table: Table, key: bytes, raw: bytes) -> Any:
    return decode(VALUE_KINDS[table], raw, db=table, key=key)


def failure(exc: lmdb.Error, doing: str) -> StorageError:
    return StorageError(f"lmdb failed to {doing}: {exc}")


def disk_full(exc: lmdb.Error) -> StoreFull:
    return StoreFull(f"the disk holding the store is full ({exc}): nothing of this operation "
                     "was stored; free space, then retry")


def abort(txn: Txn) -> None:
    # Aborting a transaction LMDB already invalidated fails; that must not mask the cause.
    with suppress(lmdb.Error):
        txn.abort()


class LmdbTables:
    """``Tables`` over the innermost LMDB transaction of ``stack``: the only place lmdb is
    called inside a transaction. ``map_full`` records that LMDB ran out of map at any
    depth, even if the work swallowed the error, so that ``transact`` retries instead of
    committing half. ``savepoints`` holds, per open savepoint, whether it has its own nested
    LMDB transaction on ``stack`` yet."""

    map_full = False

    def __init__(self, env: lmdb.Environment, txn: Txn, dbs: Dbs) -> None:
        self.env = env
        self.stack = [txn]
        self.dbs = dbs
        self.seen: dict[tuple[Table, bytes], Any] = {}
        self.dirty: dict[Table, dict[bytes, None]] = {}  # per table, the unflushed keys
        self.inserted: dict[Table, set[bytes]] = {}  # the unflushed keys that are new
        self.savepoints: list[bool] = []

    def get(self, table: Table, key: bytes) -> Any:
        found = self.seen.get((table, key), _UNSEEN)
        if found is not _UNSEEN:
            return found
        raw = self._fetch(table, key)
        if raw is None:
            found = None
        elif table in _STEADY:
            found = _decode_steady(table, key, raw)
        else:
            found = decode(VALUE_KINDS[table], raw, db=table, key=key)
        self.seen[(table, key)] = found
        return found

    def _fetch(self, table: Table, key: bytes) -> bytes | None:
        """One point read from LMDB: every read of a row not seen yet, and only those."""
        try:
            raw: bytes | None = self.stack[-1].get(key, db=self.dbs[table])
        except lmdb.Error as exc:
            raise failure(exc, f"read {table}") from exc
        return raw

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        self._flush_table(table)
        rows: list[tuple[bytes, Any]] = []
        kind = VALUE_KINDS[table]
        try:
            with self.stack[-1].cursor(db=self.dbs[table]) as cursor:
                if not cursor.set_range(prefix + start):
                    return rows
                for key, raw in cursor:
                    if not key.startswith(prefix):
                        break
                    rows.append((key, decode(kind, raw, db=table, key=key)))
        except lmdb.Error as exc:
            raise failure(exc, f"scan {table}") from exc
        return rows

    def size(self, table: Table) -> int:
        fresh = self.inserted.get(table, ())
        if len(self.dirty.get(table, ())) != len(fresh):  # other changes: LMDB counts them
            self._flush_table(table)
            fresh = ()
        try:
            entries: int = self.stack[-1].stat(self.dbs[table])["entries"]
        except lmdb.Error as exc:
            raise failure(exc, f"count {table}") from exc
        return entries + len(fresh)

    def put(self, table: Table, key: bytes, value: object) -> None:
        self.seen[(table, key)] = value
        self.dirty.setdefault(table, {})[key] = None

    def insert(self, table: Table, key: bytes, value: object) -> None:
        self.put(table, key, value)
        self.inserted.setdefault(table, set()).add(key)

    def delete(self, table: Table, key: bytes) -> None:
        self.put(table, key, None)
        self.inserted.get(table, set()).discard(key)

    def flush(self) -> None:
        """Write every changed row to LMDB."""
        for table in list(self.dirty):
            self._flush_table(table)

    def forget(self) -> None:
        """Drop what this transaction read and wrote but did not flush (a savepoint undone)."""
        self.seen.clear()
        self.dirty.clear()
        self.inserted.clear()

    def _flush_table(self, table: Table) -> None:
        keys = self.dirty.pop(table, None)
        self.inserted.pop(table, None)
        if not keys:
            return
        if self.savepoints and not self.savepoints[-1]:
            self._nest()  # the rows are the open savepoint's: they go where it can undo them
        seen = self.seen
        try:
            for key in keys:
                self._store(table, key, seen[(table, key)])
        except lmdb.MapFullError:  # a delete can split pages too
            self.map_full = True
            raise
        except lmdb.DiskError as exc:  # spilling dirty pages to a full disk
            raise disk_full(exc) from exc
        except lmdb.Error as exc:
            raise failure(exc, f"write {table}") from exc

    def _store(self, table: Table, key: bytes, value: object) -> None:
        """One write to LMDB (None deletes): at most one per changed row and flush."""
        txn, db = self.stack[-1], self.dbs[table]
        if value is None:
            txn.delete(key, db=db)
        else:
            txn.put(key, encode(value, key), db=db)

    def _nest(self) -> None:
        # While the child is open its parent must not be touched (MDB_BAD_TXN): every read
        # and write goes to the top of the stack.
        try:
            self.stack.append(self.env.begin(write=True, parent=self.stack[-1]))
        except lmdb.Error as exc:
            raise failure(exc, "open a savepoint") from exc
        self.savepoints[-1] = True

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self.flush()  # what came before belongs below this savepoint
        self.savepoints.append(False)
        try:
            yield
            if self.savepoints[-1]:
                self.flush()  # into its own nested transaction, committed below
        except BaseException:
            if self.savepoints.pop():
                abort(self.stack.pop())
            self.forget()  # the undone block's rows, and reads that may have seen them
            raise
        if self.savepoints.pop():
            child = self.stack.pop()
            try:
                child.commit()
            except lmdb.MapFullError:  # commit writes the free list and can run out of map
                self.map_full = True
                raise
            except lmdb.Error as exc:
                raise failure(exc, "commit a savepoint") from exc
        # Otherwise its unflushed rows now belong to the enclosing savepoint or transaction.


class LmdbTxn(Indexed):
    """A transaction of the port: ``Indexed`` over ``LmdbTables``, plus savepoints. Both the
    savepoint's yielded txn and the outer name keep working, exactly as with MemoryStore."""

    def __init__(self, env: lmdb.Environment, txn: Txn, dbs: Dbs) -> None:
        self.tables = LmdbTables(env, txn, dbs)
        super().__init__(self.tables)

    @contextmanager
    def savepoint(self) -> Iterator[WriteTxn]:
        with self.tables.savepoint():
            yield self
