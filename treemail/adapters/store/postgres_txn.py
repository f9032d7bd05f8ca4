"""A ``PostgresStore`` transaction: the store port's primitives as SQL over one connection, a
row cache that reads each row once, and savepoints that are SQL ``SAVEPOINT``s.

Writes go to the server at once (write-through), so a range read or a count sees them with
no flush step, and a savepoint is exactly PostgreSQL's: ``SAVEPOINT``, then ``RELEASE`` or
``ROLLBACK TO``. The cache only saves reads: each row the transaction read or wrote is kept
decoded, so a send that reads its recipient's tally for the guards and rewrites it reads it
once, and a row known to be absent is neither fetched nor deleted. An open savepoint keeps,
for each row it changes, how the cache had it before, and puts that back when it is rolled
back, with the size deltas it made.

Sizes: each table's row count lives in ``sizes``; a transaction counts its own inserts and
deletes (``INSERT ... RETURNING (xmax = 0)`` tells an insert from an update in one trip) and
adds them to ``sizes`` once, just before its commit. ``size`` is the stored count plus those.

Failures: a serialization failure, a deadlock or a lost connection mark the transaction
``retry`` before they propagate, even if the work swallows them, so that ``transact``
rolls back and runs the work again instead of committing part of it (as LMDB's ``map_full``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg
from psycopg import errors as pg_errors

from treemail.adapters.store.codec import decode, encode
from treemail.core.errors import StorageError
from treemail.core.keys import VALUE_KINDS, Table
from treemail.core.store import Indexed, WriteTxn

__all__ = ["RETRYABLE", "PgTables", "PgTxn", "Queries", "lost", "upper_bound"]

_UNSEEN: Any = object()

# The indexes whose entries name a record of another table, which ``Indexed`` then reads one
# by one (a pending message, a session of a tree, an event of the feed). A point read costs
# LMDB a page lookup but a server a round trip, so a scan of these tables also fetches the
# rows its entries name, in one query, into the cache the reads that follow hit.
_FOLLOWS = {Table.PENDING: Table.MESSAGES, Table.TREE: Table.SESSIONS, Table.FEED: Table.EVENTS}

# Errors after which the whole transaction may run again from scratch: nothing of it was
# committed, and running it again on a fresh snapshot is what the server asks for.
RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (the server went away, or restarted)."""
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, RETRYABLE)


def upper_bound(prefix: bytes) -> bytes | None:
    """The least key above every key that starts with ``prefix``; None if there is none."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


@attrs.frozen
class Queries:
    """The statements of one store's schema, composed once when the store opens."""

    get: str
    get_many: str
    upsert: str
    insert: str
    delete: str
    scan_from: str
    scan_range: str
    size: str
    grow: str
    all_rows: str

    @classmethod
    def of(cls, schema: str, conn: psycopg.Connection[Any]) -> Queries:
        from psycopg import sql

        def q(text: str) -> str:
            return sql.SQL(text).format(s=sql.Identifier(schema)).as_string(conn)

        return cls(
            get=q("SELECT value FROM {s}.rows WHERE tbl = %s AND key = %s"),
            get_many=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key = ANY(%s)"),
            upsert=q("INSERT INTO {s}.rows VALUES (%s, %s, %s) ON CONFLICT (tbl, key) "
                     "DO UPDATE SET value = EXCLUDED.value RETURNING (xmax = 0)"),
            insert=q("INSERT INTO {s}.rows VALUES (%s, %s, %s)"),
            delete=q("DELETE FROM {s}.rows WHERE tbl = %s AND key = %s RETURNING 1"),
            scan_from=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                        "ORDER BY key"),
            scan_range=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                         "AND key < %s ORDER BY key"),
            size=q("SELECT n FROM {s}.sizes WHERE tbl = %s"),
            grow=q("INSERT INTO {s}.sizes VALUES (%s, %s) ON CONFLICT (tbl) "
                   "DO UPDATE SET n = {s}.sizes.n + EXCLUDED.n"),
            all_rows=q("SELECT key, value FROM {s}.rows WHERE tbl = %s ORDER BY key"),
        )


@attrs.define
class _Open:
    """An open savepoint: its SQL name, each row it changed as the cache had it before, and
    the size deltas as they were when it began."""

    name: str
    before: dict[tuple[Table, bytes], Any] = attrs.Factory(dict)
    deltas: dict[Table, int] = attrs.Factory(dict)


class PgTables:
    """``Tables`` over one PostgreSQL connection in a transaction: the only place SQL runs
    inside one. ``done`` is set when the transaction ends: a transaction kept past its
    ``transact`` refuses use instead of starting an unowned one on the connection."""

    retry = False
    done = False

    def __init__(self, conn: psycopg.Connection[Any], queries: Queries, *,
                 write: bool) -> None:
        self.conn = conn
        self.q = queries
        self.write = write
        self.seen: dict[tuple[Table, bytes], Any] = {}
        self.deltas: dict[Table, int] = {}
        self.base_sizes: dict[Table, int] = {}
        self.savepoints: list[_Open] = []

    def _run(self, query: str, params: tuple[Any, ...], doing: str) -> list[tuple[Any, ...]]:
        if self.done:
            raise StorageError("this transaction has ended (used after its transact or read "
                               "returned); do the work inside the transaction")
        try:
            cursor = self.conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            if isinstance(exc, RETRYABLE) or lost(exc):
                self.retry = True
            raise StorageError(f"postgresql failed to {doing}: {exc}") from exc

    def get(self, table: Table, key: bytes) -> Any:
        found = self.seen.get((table, key), _UNSEEN)
        if found is not _UNSEEN:
            return found
        rows = self._run(self.q.get, (table.value, key), f"read {table}")
        found = decode(VALUE_KINDS[table], bytes(rows[0][0]), db=table, key=key) if rows else None
        self.seen[(table, key)] = found
        return found

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        bound = upper_bound(prefix)
        if bound is None:
            raw = self._run(self.q.scan_from, (table.value, prefix + start), f"scan {table}")
        else:
            raw = self._run(self.q.scan_range, (table.value, prefix + start, bound),
                            f"scan {table}")
        kind, rows = VALUE_KINDS[table], []
        for key, value in raw:
            key = bytes(key)
            rows.append((key, decode(kind, bytes(value), db=table, key=key)))
        if table in _FOLLOWS and rows:
            self._prefetch(_FOLLOWS[table], [v if type(v) is bytes else str(v).encode()
                                             for _, v in rows])
        return rows

    def _prefetch(self, table: Table, keys: list[bytes]) -> None:
        """Read the rows of ``table`` under ``keys`` not cached yet, in one query."""
        wanted = [key for key in keys if (table, key) not in self.seen]
        if not wanted:
            return
        found = self._run(self.q.get_many, (table.value, wanted), f"read {table}")
        kind = VALUE_KINDS[table]
        for key, value in found:
            key = bytes(key)
            self.seen[(table, key)] = decode(kind, bytes(value), db=table, key=key)
        # A key named but not found stays unseen: its read says so (a dangling index is
        # damage, which ``Indexed`` reports where it follows the entry).

    def size(self, table: Table) -> int:
        base = self.base_sizes.get(table)
        if base is None:
            rows = self._run(self.q.size, (table.value,), f"count {table}")
            base = self.base_sizes[table] = int(rows[0][0]) if rows else 0
        return base + self.deltas.get(table, 0)

    def put(self, table: Table, key: bytes, value: object) -> None:
        self._touch(table, key)
        known = self.seen.get((table, key), _UNSEEN)
        raw = encode(value, key)
        if known is None:  # known absent: a plain insert
            self._run(self.q.insert, (table.value, key, raw), f"write {table}")
            self._count(table, 1)
        else:
            rows = self._run(self.q.upsert, (table.value, key, raw), f"write {table}")
            if rows and rows[0][0]:
                self._count(table, 1)
        self.seen[(table, key)] = value

    def insert(self, table: Table, key: bytes, value: object) -> None:
        self._touch(table, key)
        self._run(self.q.insert, (table.value, key, encode(value, key)), f"write {table}")
        self._count(table, 1)
        self.seen[(table, key)] = value

    def delete(self, table: Table, key: bytes) -> None:
        if self.seen.get((table, key), _UNSEEN) is None:
            return  # known absent: nothing to delete
        self._touch(table, key)
        if self._run(self.q.delete, (table.value, key), f"delete from {table}"):
            self._count(table, -1)
        self.seen[(table, key)] = None

    def _count(self, table: Table, delta: int) -> None:
        self.deltas[table] = self.deltas.get(table, 0) + delta

    def _touch(self, table: Table, key: bytes) -> None:
        """Keep how the cache had the row before the open savepoint first changes it."""
        if self.savepoints:
            before, row = self.savepoints[-1].before, (table, key)
            if row not in before:
                before[row] = self.seen.get(row, _UNSEEN)

    def finish(self) -> None:
        """Add the transaction's size deltas to ``sizes``: the last writes before commit."""
        for table, delta in sorted(self.deltas.items()):
            if delta:
                self._run(self.q.grow, (table.value, delta), f"count {table}")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        opened = _Open(f"sp{len(self.savepoints) + 1}", deltas=dict(self.deltas))
        self._run(f"SAVEPOINT {opened.name}", (), "open a savepoint")
        self.savepoints.append(opened)
        try:
            yield
        except BaseException:
            self.savepoints.pop()
            self._undo(opened)
            raise
        self.savepoints.pop()
        self._run(f"RELEASE SAVEPOINT {opened.name}", (), "release a savepoint")
        if self.savepoints:  # its changes are now the enclosing savepoint's to undo
            enclosing = self.savepoints[-1].before
            for row, was in opened.before.items():
                enclosing.setdefault(row, was)

    def _undo(self, undone: _Open) -> None:
        for row, was in undone.before.items():
            if was is _UNSEEN:
                self.seen.pop(row, None)
            else:
                self.seen[row] = was
        self.deltas = undone.deltas
        if self.retry:
            return  # the transaction is lost anyway: transact rolls it all back
        # ROLLBACK TO keeps the savepoint; RELEASE then drops it, as if it never was.
        self._run(f"ROLLBACK TO SAVEPOINT {undone.name}", (), "undo a savepoint")
        self._run(f"RELEASE SAVEPOINT {undone.name}", (), "undo a savepoint")


class PgTxn(Indexed):
    """A transaction of the port: ``Indexed`` over ``PgTables``, plus savepoints. Both the
    savepoint's yielded txn and the outer name keep working, as with MemoryStore."""

    def __init__(self, tables: PgTables) -> None:
        self.tables = tables
        super().__init__(tables)

    @contextmanager
    def savepoint(self) -> Iterator[WriteTxn]:
        if not self.tables.write:
            raise StorageError("a read transaction has no savepoints; use transact")
        with self.tables.savepoint():
            yield self
