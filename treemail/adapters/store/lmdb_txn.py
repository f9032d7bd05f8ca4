"""An ``LmdbStore`` transaction: the store port's primitives over LMDB, with a row cache
that reads and writes each row once, and savepoints that cost no LMDB transaction unless
they must.

``LmdbTables`` keeps each row the transaction read or wrote, decoded, so that nothing is read
and decoded twice: a send reads its recipient's tally for the guards and then rewrites it.
Writes are kept there too and reach LMDB once per row, encoded, when ``flush`` runs: before a
scan or count of their table (LMDB answers those) and before the commit. So a row a send
changes four times (the tally: the message seq, two guard counters, the last event seq) is
one put, and a row a whole group-commit batch changes (the recipient's tally) is one put for
the batch. The feed's end (``size``, the only size the port asks) is counted in LMDB once
and then kept: each ``insert`` is the next number, an undone savepoint gives its numbers back,
and the store hands the end its commit left to the next transaction.

Savepoints: an open savepoint keeps, for each row it changes, how the row was before it (an
undo log over the cache); undoing it restores those. Only when rows must reach LMDB while it
is open (a scan or count of a table it changed) does it get a nested LMDB transaction,
after the rows as they were before it are written below that; the nested transaction is
then committed into its parent or aborted with the savepoint. A send in a batch needs none:
the nested transaction, which copies every page it touches, and the write-out at every
savepoint's edge were a fifth of a batched send's cost.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeAlias

import attrs
import lmdb

from treemail.adapters.store.codec import decode, encode_rows
from treemail.core.errors import StorageError, StoreFull
from treemail.core.keys import (
    HEADS,
    NUMBERED,
    VALUE_KINDS,
    Table,
    Tally,
    stored_key,
    stored_prefix,
)
from treemail.core.store import Indexed, WriteTxn

__all__ = ["Db", "LmdbTables", "LmdbTxn", "abort", "disk_full", "failure"]

Txn: TypeAlias = "lmdb.Transaction[bytes]"
Db: TypeAlias = "lmdb._Database"

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


# The tally row every send reads and rewrites changes every time, so ``_STEADY`` cannot keep
# it. Instead each tally's bytes as this process last wrote them are kept with the record
# they encode: the next transaction that reads those very bytes takes the record rather than
# checksum and decode them; any other bytes (another writer's, a damaged row) are decoded and
# checked. A tally round-trips exactly (ints under str slots), and is replaced, never mutated.
_WRITTEN_TALLIES: dict[bytes, tuple[bytes, Any]] = {}
_WRITTEN_LIMIT = 1 << 14  # sessions' tallies kept before the memory is started afresh


def failure(exc: lmdb.Error, doing: str) -> StorageError:
    return StorageError(f"lmdb failed to {doing}: {exc}")


def disk_full(exc: lmdb.Error) -> StoreFull:
    return StoreFull(f"the disk holding the store is full ({exc}): nothing of this operation "
                     "was stored; free space, then retry")


def abort(txn: Txn) -> None:
    # Aborting a transaction LMDB already invalidated fails; that must not mask the cause.
    with suppress(lmdb.Error):
        txn.abort()


@attrs.define
class _Open:
    """An open savepoint: each row it changed as it was before (its cached value or
    ``_UNSEEN``, and whether it was unflushed), and whether it has its own nested LMDB
    transaction on the stack."""

    before: dict[tuple[Table, bytes], tuple[Any, bool]] = attrs.Factory(dict)
    nested: bool = False
    feed_end: int | None = None  # the feed's end when it opened


class LmdbTables:
    """``Tables`` over the innermost LMDB transaction of ``stack``: the only place lmdb is
    called inside a transaction. ``map_full`` records that LMDB ran out of map at any
    depth, even if the work swallowed the error, so that ``transact`` retries instead of
    committing half."""

    map_full = False

    def __init__(self, env: lmdb.Environment, txn: Txn, db: Db,
                 feed_end: int | None = None) -> None:
        self.env = env
        self.stack = [txn]
        self.db = db  # every table, in the one key space of ``keys.stored_key``
        self.seen: dict[tuple[Table, bytes], Any] = {}
        # The feed's last number, rows not flushed yet included, once known (None: count it).
        # The store hands on the number its last commit left, so a send does not seek the
        # feed's end in LMDB: the port changes the feed only by ``append_feed``, which sizes
        # it first (the new row's number is the size + 1), so while the end is unknown every
        # feed row is in LMDB.
        self.feed_end = feed_end
        self.dirty: dict[Table, dict[bytes, None]] = {}  # per table, the unflushed keys
        self.savepoints: list[_Open] = []

    def get(self, table: Table, key: bytes) -> Any:
        row = (table, key)
        if row in self.seen:  # a membership test is no call, unlike ``seen.get``
            return self.seen[row]
        # One point read from LMDB: every read of a row not seen yet, and only those.
        try:
            raw: bytes | None = self.stack[-1].get(stored_key(table, key), db=self.db)
        except lmdb.Error as exc:
            raise failure(exc, f"read {table}") from exc
        if raw is None:
            found = None
        elif table in _STEADY:
            found = _decode_steady(table, key, raw)
        elif table is Table.TALLY and key in _WRITTEN_TALLIES and _WRITTEN_TALLIES[key][0] == raw:
            found = _WRITTEN_TALLIES[key][1]
        else:
            found = decode(VALUE_KINDS[table], raw, db=table, key=key)
        self.seen[row] = found
        return found

    def get_rows(self, rows: Sequence[tuple[Table, bytes]]) -> list[Any]:
        """``get`` of each row, written out: a send's first three reads (its session, run
        and replay row) in one call. A tally is decoded afresh here, which ``get`` spares
        for bytes this process wrote: a send reads its tally alone."""
        seen, txn, db = self.seen, self.stack[-1], self.db
        for row in rows:
            if row in seen:
                continue
            table, key = row
            try:
                raw: bytes | None = txn.get(stored_key(table, key), db=db)
            except lmdb.Error as exc:
                raise failure(exc, f"read {table}") from exc
            if raw is None:
                seen[row] = None
            elif table in _STEADY:
                seen[row] = _decode_steady(table, key, raw)
            else:
                seen[row] = decode(VALUE_KINDS[table], raw, db=table, key=key)
        return [seen[row] for row in rows]

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        self._flush_table(table)
        rows: list[tuple[bytes, Any]] = []
        kind = VALUE_KINDS[table]
        stored = stored_prefix(table, prefix)
        # Past the stored prefix, a stored key and its table's key are the same bytes.
        try:
            with self.stack[-1].cursor(db=self.db) as cursor:
                if not cursor.set_range(stored + start):
                    return rows
                for key, raw in cursor:
                    if not key.startswith(stored):
                        break
                    key = prefix + key[len(stored):]
                    rows.append((key, decode(kind, raw, db=table, key=key)))
        except lmdb.Error as exc:
            raise failure(exc, f"scan {table}") from exc
        return rows

    def size(self, table: Table) -> int:
        """The feed's size: the port sizes no other table (``Indexed.feed_end``), so no
        other is counted here."""
        if table is not Table.FEED:
            raise ValueError(f"LmdbTables sizes only the feed, not {table}")
        if self.feed_end is None:  # every feed row is in LMDB (``__init__``)
            try:
                self.feed_end = self._count(table)
            except lmdb.Error as exc:
                raise failure(exc, f"count {table}") from exc
        return self.feed_end

    def _count(self, table: Table) -> int:
        """The feed's rows in LMDB. The feed is dense from 1 (see ``Indexed.feed_end``), so
        its count is its last number: one seek to its range's end, however long it is."""
        stored = stored_prefix(table, b"")
        with self.stack[-1].cursor(db=self.db) as cursor:
            found = cursor.set_range(stored + b"\xff" * 9)
            found = cursor.prev() if found else cursor.last()
            key = cursor.key()
            return int.from_bytes(key[len(stored):], "big") if (
                found and key.startswith(stored)) else 0

    def put(self, table: Table, key: bytes, value: object) -> None:
        if self.savepoints:
            self._touch(table, key)
        self.seen[(table, key)] = value
        try:  # no call on the path every write takes
            self.dirty[table][key] = None
        except KeyError:
            self.dirty[table] = {key: None}

    def put_rows(self, rows: Iterable[tuple[Table, bytes, object]]) -> None:
        """``put`` of each row, in one call: ``put`` written out for a transaction without
        an open savepoint (every send's), which keeps no row's before-image."""
        if self.savepoints:
            for table, key, value in rows:
                self.put(table, key, value)
            return
        seen, dirty = self.seen, self.dirty
        for table, key, value in rows:
            seen[(table, key)] = value
            try:  # as in ``put``
                dirty[table][key] = None
            except KeyError:
                dirty[table] = {key: None}

    def append_feed(self, event: bytes) -> None:
        """``put`` of ``event`` under the feed's next number, written out; the kept end
        counts it, so ``size`` needs no flush."""
        end = self.size(Table.FEED) if self.feed_end is None else self.feed_end
        # A number of 8 bytes, as ``keys.feed`` makes it: the feed never reaches 2**64 rows.
        key = (end + 1).to_bytes(8, "big")
        if self.savepoints:
            self._touch(Table.FEED, key)
        self.seen[(Table.FEED, key)] = event
        try:  # as in ``put``
            self.dirty[Table.FEED][key] = None
        except KeyError:
            self.dirty[Table.FEED] = {key: None}
        self.feed_end = end + 1  # the next number (see ``Indexed.feed_end``)

    def delete(self, table: Table, key: bytes) -> None:
        self.put(table, key, None)

    def _touch(self, table: Table, key: bytes) -> None:
        """Keep how the row was before the open savepoint first changes it."""
        before, row = self.savepoints[-1].before, (table, key)
        if row not in before:
            before[row] = (self.seen.get(row, _UNSEEN), key in self.dirty.get(table, ()))

    def flush(self) -> None:
        """Write every changed row to LMDB (one pass over every table's rows: a send
        changes six tables, and a pass per table cost more calls than its writes).

        Only two callers flush, neither with a savepoint open that lacks its nested
        transaction: the commit (no savepoint open) and a nested savepoint's exit. So every
        row goes where an open savepoint can undo it without a ``_nest`` here."""
        if not self.dirty:
            return
        assert not self.savepoints or self.savepoints[-1].nested  # see the docstring
        dirty, self.dirty = self.dirty, {}
        self._write(dirty)

    def _flush_table(self, table: Table) -> None:
        if not self.dirty.get(table):
            return
        if self.savepoints and not self.savepoints[-1].nested:
            self._nest()  # the rows go where the open savepoints can undo them
        rows = self.dirty.pop(table, {})  # _nest may have written them all below it
        self._write({table: rows})

    def _write(self, dirty: dict[Table, dict[bytes, None]], where: str | None = None) -> None:
        """Encode the rows of ``dirty`` and hand them to LMDB together (``_to_lmdb``): one
        pass, no call per row but its key's place and its encoding. A failure names
        ``where`` the rows went, else their tables."""
        seen = self.seen
        # Most of a send's rows are new (its message, feed entry, event and pending entry),
        # so their stored keys are built here, without a call: ``stored_key``'s cache would
        # miss them and drop a key that reads hit. A row of a table keyed by its own id or
        # number goes under its table's head; a session's numbered row has its tag put
        # before its number (``keys.NUMBERED``). The tally and replay rows, read first, hit.
        rows = [(HEADS[table] + key if table in HEADS
                 else key[:-8] + NUMBERED[table] + key[-8:] if table in NUMBERED
                 else stored_key(table, key), key, seen[(table, key)])
                for table, changed in dirty.items() for key in changed]
        encoded = encode_rows(rows)
        for (_, raw), (_, key, value) in zip(encoded, rows, strict=True):
            # A tally's bytes are kept with it, for the next read (``_WRITTEN_TALLIES``).
            if type(value) is Tally and raw is not None:
                if key not in _WRITTEN_TALLIES and len(_WRITTEN_TALLIES) >= _WRITTEN_LIMIT:
                    _WRITTEN_TALLIES.clear()
                _WRITTEN_TALLIES[key] = (raw, value)
        try:
            self._to_lmdb(encoded)
        except lmdb.Error as exc:
            what = where or ", ".join(str(table) for table in dirty)
            raise self._write_error(exc, what)  # noqa: B904 - it chains to exc

    def _write_error(self, exc: lmdb.Error, what: str) -> Exception:
        """What a failed LMDB write raises (a plain try, not a context manager: this wraps
        every flush, and a context manager costs more than the writes of a small one)."""
        if isinstance(exc, lmdb.MapFullError):  # a delete can split pages too
            self.map_full = True
            return exc
        if isinstance(exc, lmdb.DiskError):  # spilling dirty pages to a full disk
            return disk_full(exc)
        return failure(exc, f"write {what}")

    def _to_lmdb(self, rows: list[tuple[bytes, bytes | None]]) -> None:
        """Write ``rows`` (stored key, encoded value; None deletes) to LMDB: the one seam
        every row passes on its way there, once per flush. The crash tests fail it row by
        row; the bench's floor records the rows through it."""
        txn, db = self.stack[-1], self.db
        for _, raw in rows:
            if raw is None:
                break
        else:
            # Puts only (every send's flush): LMDB takes them in one call, not one each. A
            # failure names the flush's tables either way; the cursor goes with the call.
            txn.cursor(db=db).putmulti(rows)  # type: ignore[arg-type]  # no None: see above
            return
        for stored, raw in rows:
            if raw is None:
                txn.delete(stored, db=db)
            else:
                txn.put(stored, raw, db=db)

    def _nest(self) -> None:
        """Give every open savepoint without one its nested LMDB transaction, outermost
        first, each after writing below it the rows as they were before it began."""
        for level, open_ in enumerate(self.savepoints):
            if open_.nested:
                continue
            self._write_below(self.savepoints[level:])
            # While the child is open its parent must not be touched (MDB_BAD_TXN): every
            # read and write goes to the top of the stack.
            try:
                self.stack.append(self.env.begin(write=True, parent=self.stack[-1]))
            except lmdb.Error as exc:
                raise failure(exc, "open a savepoint") from exc
            open_.nested = True

    def _write_below(self, opened: list[_Open]) -> None:
        """Write to the top LMDB transaction each unflushed row none of ``opened`` changed:
        those belong below them. A row one of them changed stays unflushed; its undo entry
        restores it, unflushed as it was, if that savepoint is undone."""
        below: dict[Table, dict[bytes, None]] = {}
        for table, rows in list(self.dirty.items()):
            for key in [k for k in rows if not any((table, k) in each.before for each in opened)]:
                below.setdefault(table, {})[key] = None
                del rows[key]
            if not rows:
                del self.dirty[table]
        self._write(below, "below a savepoint")

    def _undo(self, undone: _Open) -> None:
        self.feed_end = undone.feed_end
        for (table, key), (value, unflushed) in undone.before.items():
            if value is _UNSEEN:
                self.seen.pop((table, key), None)
            else:
                self.seen[(table, key)] = value
            rows = self.dirty.setdefault(table, {})
            if unflushed:
                rows[key] = None
            else:
                rows.pop(key, None)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        opened = _Open(feed_end=self.feed_end)
        self.savepoints.append(opened)
        try:
            yield
            if opened.nested:
                self.flush()  # its rows, into its own nested transaction
        except BaseException:
            self.savepoints.pop()
            if opened.nested:
                abort(self.stack.pop())
            self._undo(opened)
            raise
        self.savepoints.pop()
        if opened.nested:
            child = self.stack.pop()
            try:
                child.commit()
            except lmdb.MapFullError:  # commit writes the free list and can run out of map
                self.map_full = True
                raise
            except lmdb.Error as exc:
                raise failure(exc, "commit a savepoint") from exc
        if self.savepoints:  # its changes are now the enclosing savepoint's to undo
            enclosing = self.savepoints[-1].before
            for row, was in opened.before.items():
                enclosing.setdefault(row, was)


class LmdbTxn(Indexed):
    """A transaction of the port: ``Indexed`` over ``LmdbTables``, plus savepoints. Both the
    savepoint's yielded txn and the outer name keep working, exactly as with MemoryStore."""

    def __init__(self, env: lmdb.Environment, txn: Txn, db: Db,
                 feed_end: int | None = None) -> None:
        # ``Indexed.__init__`` written out, as ``MemoryStore``'s: a transaction per send.
        self._t = self.tables = LmdbTables(env, txn, db, feed_end)

    @contextmanager
    def savepoint(self) -> Iterator[WriteTxn]:
        with self.tables.savepoint():
            yield self
