"""A ``PostgresStore`` transaction: the store port's primitives as SQL over one connection, a
row cache that reads each row once, and savepoints that are SQL ``SAVEPOINT``s.

Each row the transaction read or wrote is kept decoded in a cache, so a send that reads its
recipient's tally for the guards and rewrites it reads it once, and a row known to be absent
is neither fetched nor deleted. Writes are queued, not sent: a row written several times at
one savepoint depth (a send writes its recipient's tally four times) is one statement, and
the queue goes to the server in one pipeline (one round trip, however many statements) when
something must see it: a range read, a count that needs an answer only the server has, the
commit. A point read never waits for the queue: every row in it is in the cache.

Savepoints are PostgreSQL's (``SAVEPOINT``, ``RELEASE``, ``ROLLBACK TO``), queued in order
with the writes. An open savepoint keeps, for each row it changes, how the cache had it
before; undoing it puts that back, and drops its queued statements if its ``SAVEPOINT`` was
never sent (then the server never hears of it), else queues ``ROLLBACK TO``. A send of a
group-commit batch thus costs no round trip for its savepoint.

Sizes: each table's row count lives in ``sizes``. A write whose effect on the count is known
from the cache (an insert, a delete of a row read) counts at once; one whose row was never
read is sent as ``INSERT ... RETURNING (xmax = 0)`` (or ``DELETE ... RETURNING``), which
tells an insert from an update, and counts when its answer comes. The deltas go to ``sizes``
in one statement before the commit; ``size`` is the stored count plus them.

Trees written: each write of a row that belongs to one session (its record, a run, a
message, an event, an approval, its tally) names that session in ``touched``; a savepoint
undone forgets what it named. A store shared by daemons fences on these alone
(``PostgresStore``): a transaction is checked against the leases of the trees it writes,
not of every tree its daemon holds. Every other row (indexes, counters, the feed) is
written beside one of those in the same operation, so naming these misses no tree.

Failures: a serialization failure, a deadlock or a lost connection mark the transaction
``retry`` before they propagate, even if the work swallows them, so that ``transact``
rolls back and runs the work again instead of committing part of it (as LMDB's ``map_full``).
Any other failed statement marks it ``broken``: a queued write fails where the queue is sent,
not where it was made, so no savepoint can claim to have undone it, and the transaction is
only ever rolled back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from treemail.adapters.store.codec import decode, encode
from treemail.core.errors import StorageError, StoreFenced
from treemail.core.keys import VALUE_KINDS, Table, identity
from treemail.core.records import Session
from treemail.core.store import Indexed, WriteTxn

__all__ = ["RETRYABLE", "PgTables", "PgTxn", "Queries", "lost", "upper_bound"]

_UNSEEN: Any = object()

# The indexes whose entries name a record of another table, which ``Indexed`` then reads one
# by one (a pending message, a session of a tree, an event of the feed). A point read costs
# LMDB a page lookup but a server a round trip, so a scan of these tables also fetches the
# rows its entries name, in one query, into the cache the reads that follow hit.
_FOLLOWS = {Table.PENDING: Table.MESSAGES, Table.TREE: Table.SESSIONS, Table.FEED: Table.EVENTS}

# The tables whose rows each belong to one session, and how a row names it.
_SESSION_OF: dict[Table, Any] = {
    Table.SESSIONS: lambda key, value: value.session_id,
    Table.RUNS: lambda key, value: value.session_id,
    Table.MESSAGES: lambda key, value: value.recipient,
    Table.EVENTS: lambda key, value: value.session_id,
    Table.APPROVALS: lambda key, value: value.session_id,
    Table.TALLY: lambda key, value: key.decode(),
}

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
    update: str
    insert: str
    delete: str
    scan_from: str
    scan_range: str
    size: str
    grow: str
    grow_many: str
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
            update=q("UPDATE {s}.rows SET value = %s WHERE tbl = %s AND key = %s"),
            insert=q("INSERT INTO {s}.rows VALUES (%s, %s, %s)"),
            delete=q("DELETE FROM {s}.rows WHERE tbl = %s AND key = %s RETURNING 1"),
            scan_from=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                        "ORDER BY key"),
            scan_range=q("SELECT key, value FROM {s}.rows WHERE tbl = %s AND key >= %s "
                         "AND key < %s ORDER BY key"),
            size=q("SELECT n FROM {s}.sizes WHERE tbl = %s"),
            grow=q("INSERT INTO {s}.sizes VALUES (%s, %s) ON CONFLICT (tbl) "
                   "DO UPDATE SET n = {s}.sizes.n + EXCLUDED.n"),
            grow_many=q("INSERT INTO {s}.sizes SELECT * FROM unnest(%s::text[], %s::bigint[]) "
                        "ON CONFLICT (tbl) DO UPDATE SET n = {s}.sizes.n + EXCLUDED.n"),
            all_rows=q("SELECT key, value FROM {s}.rows WHERE tbl = %s ORDER BY key"),
        )


@attrs.define
class _Write:
    """A queued write of one row: its value (None deletes), and whether the row existed
    before it (True, False, or None when the cache never saw it: the server will say)."""

    table: Table
    key: bytes
    value: Any
    existed: bool | None


@attrs.define
class _Open:
    """An open savepoint: its SQL name, where its ``SAVEPOINT`` sits in the queue (the
    queue's epoch and index: unsent while the epoch is current), each row it changed as the
    cache had it before, and the size deltas as they were when it began."""

    name: str
    epoch: int
    index: int
    before: dict[tuple[Table, bytes], Any] = attrs.Factory(dict)
    deltas: dict[Table, int] = attrs.Factory(dict)
    touched: int = 0  # how many sessions were named when it began


def _known_delta(existed: bool | None, value: Any) -> int:
    """What a write does to its table's count, as far as the cache knows."""
    if existed is False and value is not None:
        return 1
    if existed is True and value is None:
        return -1
    return 0


class PgTables:
    """``Tables`` over one PostgreSQL connection in a transaction: the only place SQL runs
    inside one. ``done`` is set when the transaction ends: a transaction kept past its
    ``transact`` refuses use instead of starting an unowned one on the connection."""

    retry = False
    broken = False
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
        self.queue: list[_Write | str] = []
        self.latest: dict[tuple[Table, bytes], _Write] = {}  # this depth's queued rows
        self.unknown: dict[Table, int] = {}  # queued writes whose count the server gives
        self.epoch = 0
        self.touched: list[str] = []  # the sessions written (repeats kept: undo truncates)
        # Trees a fence refused in an earlier attempt: a write into one raises at once.
        self.refused: frozenset[str] = frozenset()

    def _check(self) -> None:
        if self.done:
            raise StorageError("this transaction has ended (used after its transact or read "
                               "returned); do the work inside the transaction")
        if self.broken:
            raise StorageError("an earlier statement of this transaction failed; it can only "
                               "be rolled back")

    def _failed(self, exc: psycopg.Error, doing: str) -> StorageError:
        if isinstance(exc, RETRYABLE) or lost(exc):
            self.retry = True
        else:
            self.broken = True
        return StorageError(f"postgresql failed to {doing}: {exc}")

    def _run(self, query: str | sql.Composed, params: tuple[Any, ...],
             doing: str) -> list[tuple[Any, ...]]:
        self._check()
        try:
            cursor = self.conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            raise self._failed(exc, doing) from exc

    def query(self, query: str | sql.Composed, params: tuple[Any, ...],
              doing: str) -> list[tuple[Any, ...]]:
        """Run one statement of the store's own (not a row of ``Table``) in the transaction."""
        self.flush()
        return self._run(query, params, doing)

    # -- reads ---------------------------------------------------------------------------

    def get(self, table: Table, key: bytes) -> Any:
        found = self.seen.get((table, key), _UNSEEN)
        if found is not _UNSEEN:
            return found
        rows = self._run(self.q.get, (table.value, key), f"read {table}")
        found = decode(VALUE_KINDS[table], bytes(rows[0][0]), db=table, key=key) if rows else None
        self.seen[(table, key)] = found
        return found

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        self.flush()
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
        if self.unknown.get(table):
            self.flush()  # the server's answers settle the counts of those writes
        base = self.base_sizes.get(table)
        if base is None:
            rows = self._run(self.q.size, (table.value,), f"count {table}")
            base = self.base_sizes[table] = int(rows[0][0]) if rows else 0
        return base + self.deltas.get(table, 0)

    # -- writes: queued ------------------------------------------------------------------

    def put(self, table: Table, key: bytes, value: object) -> None:
        self._queue(table, key, value)

    def insert(self, table: Table, key: bytes, value: object) -> None:
        if (table, key) not in self.seen:
            self.seen[(table, key)] = None  # an append: the row is new
        self._queue(table, key, value)

    def delete(self, table: Table, key: bytes) -> None:
        if self.seen.get((table, key), _UNSEEN) is None:
            return  # known absent: nothing to delete
        self._queue(table, key, None)

    def _queue(self, table: Table, key: bytes, value: Any) -> None:
        self._check()
        row = (table, key)
        if self.savepoints:
            before = self.savepoints[-1].before
            if row not in before:
                before[row] = self.seen.get(row, _UNSEEN)
        queued = self.latest.get(row)
        if queued is None:
            known = self.seen.get(row, _UNSEEN)
            queued = _Write(table, key, value, None if known is _UNSEEN else known is not None)
            self.latest[row] = queued
            self.queue.append(queued)
            if queued.existed is None:
                self.unknown[table] = self.unknown.get(table, 0) + 1
        else:  # written again at this depth: one statement for both
            self._count(table, -_known_delta(queued.existed, queued.value))
            queued.value = value
        self._count(table, _known_delta(queued.existed, value))
        self.seen[row] = value
        if value is not None and (named := _SESSION_OF.get(table)) is not None:
            self._touch(named(key, value))

    def _touch(self, session_id: str) -> None:
        touched = self.touched
        if not touched or touched[-1] != session_id:
            touched.append(session_id)
        if self.refused and (tree := self.root(session_id)) in self.refused:
            raise StoreFenced(
                f"this daemon does not own tree {tree} (its lease was taken over by another "
                "daemon, ran out, or was never this daemon's): nothing of this operation was "
                "stored; send it to the tree's owner", trees=[tree])

    def root(self, session_id: str) -> str:
        """The tree of a session this transaction wrote. A session without a record (the
        port used raw, as its own tests do) counts as a tree of its own."""
        session: Session | None = self.get(Table.SESSIONS, identity(session_id))
        return session_id if session is None else session.root_session_id

    def trees(self) -> set[str]:
        """The trees this transaction writes."""
        return {self.root(s) for s in set(self.touched)}

    def _count(self, table: Table, delta: int) -> None:
        if delta:
            self.deltas[table] = self.deltas.get(table, 0) + delta

    def _statement(self, write: _Write) -> tuple[str, tuple[Any, ...]] | None:
        table, key, value = write.table.value, write.key, write.value
        if value is None:
            return None if write.existed is False else (self.q.delete, (table, key))
        raw = encode(value, write.key)
        if write.existed is False:
            return self.q.insert, (table, key, raw)
        if write.existed is True:
            return self.q.update, (raw, table, key)
        return self.q.upsert, (table, key, raw)

    def flush(self) -> None:
        """Send every queued statement in one pipeline, and count what the server answers."""
        self._check()
        if not self.queue:
            return
        queue, self.queue, self.latest = self.queue, [], {}
        epoch, self.epoch = self.epoch, self.epoch + 1
        answers: list[tuple[int, _Write, psycopg.Cursor[Any]]] = []
        try:
            with self.conn.pipeline():
                for place, item in enumerate(queue):
                    if isinstance(item, str):
                        self.conn.execute(item)
                    elif (statement := self._statement(item)) is not None:
                        cursor = self.conn.execute(*statement)
                        if item.existed is None:
                            answers.append((place, item, cursor))
            for place, write, cursor in answers:
                self._answered(epoch, place, write, cursor.fetchone())
        except psycopg.Error as exc:
            raise self._failed(exc, "write") from exc
        finally:
            self.unknown = {}

    def _answered(self, epoch: int, place: int, write: _Write,
                  row: tuple[Any, ...] | None) -> None:
        """Count a write the server said was new (or, for a delete, was there)."""
        if write.value is None:
            delta = -1 if row is not None else 0
        else:
            delta = 1 if row is not None and row[0] else 0
        if not delta:
            return
        self._count(write.table, delta)
        # A savepoint opened after this write began with deltas that lacked it: its undo
        # must keep it, as the write stays.
        for opened in self.savepoints:
            if opened.epoch == epoch and opened.index > place:
                opened.deltas[write.table] = opened.deltas.get(write.table, 0) + delta

    def finish(self) -> None:
        """Send the queue, then the size deltas: the last statements before the commit."""
        self.flush()
        changed = sorted((t.value, d) for t, d in self.deltas.items() if d)
        if changed:
            self._run(self.q.grow_many, ([t for t, _ in changed], [d for _, d in changed]),
                      "count rows")

    # -- savepoints ----------------------------------------------------------------------

    def also(self, statement: str) -> None:
        """Queue one statement of the store's own (no parameters, no answer) with the
        writes: it costs no round trip of its own."""
        self._mark(statement)

    def _mark(self, statement: str) -> None:
        self._check()
        self.queue.append(statement)
        self.latest = {}  # a row written after the mark is a new statement

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        opened = _Open(f"sp{len(self.savepoints) + 1}", self.epoch, len(self.queue),
                       deltas=dict(self.deltas), touched=len(self.touched))
        self._mark(f"SAVEPOINT {opened.name}")
        self.savepoints.append(opened)
        try:
            yield
        except BaseException:
            self.savepoints.pop()
            self._undo(opened)
            raise
        self.savepoints.pop()
        self._mark(f"RELEASE SAVEPOINT {opened.name}")
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
        del self.touched[undone.touched:]
        if self.retry or self.broken or self.done:
            return  # the transaction is lost anyway: transact rolls it all back
        if undone.epoch == self.epoch:  # its SAVEPOINT was never sent: unsay it all
            dropped = self.queue[undone.index:]
            del self.queue[undone.index:]
            for item in dropped:
                if isinstance(item, _Write) and item.existed is None:
                    self.unknown[item.table] -= 1
            self.latest = {}
            return
        # Everything queued now came after its SAVEPOINT, inside it: drop it, and undo what
        # was sent. ROLLBACK TO keeps the savepoint; RELEASE then drops it, as if it never was.
        self.queue, self.latest, self.unknown = [], {}, {}
        self._mark(f"ROLLBACK TO SAVEPOINT {undone.name}")
        self._mark(f"RELEASE SAVEPOINT {undone.name}")


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
