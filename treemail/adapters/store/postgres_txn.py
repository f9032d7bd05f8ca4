"""A ``PostgresStore`` transaction: the store port's primitives as SQL over one connection, a
row cache that reads each row once, and savepoints that are SQL ``SAVEPOINT``s.

Each row the transaction read or wrote is kept decoded in a cache, so a send that reads its
recipient's tally for the guards and rewrites it reads it once, and a row known to be absent
is neither fetched nor deleted. Writes are queued, not sent: a row written several times at
one savepoint depth (a send writes its recipient's tally four times) is one statement, and
the queue goes to the server in one pipeline (one round trip, however many statements) at
the commit (or for a count only the server has, which nothing on a hot path asks). A point
read never waits for the queue: every row in it is in the cache; a range read lays the rows
the transaction wrote over the server's. Why not send the queue earlier: a transaction gets
its id at its first write, and the feed shows nothing committed after that id until the
transaction ends (``postgres_feed``); a group commit gathering calls for 50 ms with an id
would hold every other writer's events back that long.

Savepoints are PostgreSQL's (``SAVEPOINT``, ``RELEASE``, ``ROLLBACK TO``), queued in order
with the writes. An open savepoint keeps, for each row it changes, how the cache had it
before; undoing it puts that back, and drops its queued statements if its ``SAVEPOINT`` was
never sent (then the server never hears of it), else queues ``ROLLBACK TO``. A send of a
group-commit batch thus costs no round trip for its savepoint.

The feed: an append to ``Table.FEED`` is queued as a row of the feed's own table, without a
number (``postgres_feed``: numbers are given in commit order, after the commit); the
transaction counts its own appends, so that its ``size`` of the feed is the committed end
plus them. No row counts are kept: a count every write bumps would be a row every write
transaction touches. ``size`` of any other table counts its rows (no caller needs it).

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

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from treemail.adapters.store.codec import decode, encode
from treemail.adapters.store.postgres_sql import Queries
from treemail.core.errors import StorageError, StoreFenced
from treemail.core.keys import VALUE_KINDS, Table, identity
from treemail.core.records import Session
from treemail.core.store import Indexed, WriteTxn

__all__ = ["RETRYABLE", "PgTables", "PgTxn", "lost", "upper_bound"]

_UNSEEN: Any = object()
# Queued last by a transaction that appended to the feed: its id, which the store then waits
# to see below the horizon before ``transact`` returns (``PostgresStore``).
_XID = "SELECT pg_current_xact_id()::text"

# The indexes whose entries name a record of another table, which ``Indexed`` then reads one
# by one (a pending message, a session of a tree, an event of the feed). A point read costs
# LMDB a page lookup but a server a round trip, so a scan of these tables also fetches the
# rows its entries name, in one query, into the cache the reads that follow hit.
# (The feed's read fetches its events in the same query: ``_feed``.)
_FOLLOWS = {Table.PENDING: Table.MESSAGES, Table.TREE: Table.SESSIONS}

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
# committed, and running it again on a fresh snapshot is what the server asks for. A unique
# violation is one: a key this snapshot did not show (an idempotency key, a new tree's
# lease) was stored meanwhile by another transaction, which the next snapshot shows.
RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected,
             pg_errors.UniqueViolation)


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (the server went away, or restarted)."""
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, RETRYABLE)


def upper_bound(prefix: bytes) -> bytes | None:
    """The least key above every key that starts with ``prefix``; None if there is none."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


@attrs.define
class _Write:
    """A queued write of one row: its value (None deletes), and whether the row existed
    before it (True, False, or None when the cache never saw it)."""

    table: Table
    key: bytes
    value: Any
    existed: bool | None


@attrs.frozen
class _Append:
    """A queued append to the feed: the event's key, and its place in this transaction."""

    idx: int
    event: bytes


@attrs.define
class _Open:
    """An open savepoint: its SQL name, where its ``SAVEPOINT`` sits in the queue (the
    queue's epoch and index: unsent while the epoch is current), each row it changed as the
    cache had it before, and how many events the transaction had appended when it began."""

    name: str
    epoch: int
    index: int
    before: dict[tuple[Table, bytes], Any] = attrs.Factory(dict)
    appended: int = 0
    touched: int = 0  # how many sessions were named when it began


class PgTables:
    """``Tables`` over one PostgreSQL connection in a transaction: the only place SQL runs
    inside one. ``done`` is set when the transaction ends: a transaction kept past its
    ``transact`` refuses use instead of starting an unowned one on the connection."""

    retry = False
    broken = False
    done = False

    def __init__(self, conn: psycopg.Connection[Any], queries: Queries, *,
                 write: bool,
                 committed: Callable[[Callable[[psycopg.Connection[Any]], Any]], Any] | None
                 = None) -> None:
        self.conn = conn
        self.q = queries
        self.write = write
        # Where a write transaction reads the committed feed: a reader's connection
        # (``postgres_feed`` says why not its own); a read transaction reads its own.
        self.committed = committed
        self.seen: dict[tuple[Table, bytes], Any] = {}
        self.savepoints: list[_Open] = []
        self.queue: list[_Write | _Append | str] = []
        self.latest: dict[tuple[Table, bytes], _Write] = {}  # this depth's queued rows
        # Each row this transaction wrote, as it wrote it last (None: deleted): a range read
        # lays these over the server's rows instead of sending the queue first, so that
        # nothing is written until the commit (``flush``).
        self.written: dict[Table, dict[bytes, Any]] = {}
        self.appended = 0  # events appended to the feed (undone with their savepoints)
        self.feed_base: int | None = None  # the committed feed's end, once read
        self.next_idx = 0  # never reused, even after an undo: only the order matters
        self.xid: str | None = None  # this transaction's id, asked for if it appended
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

    def get_rows(self, rows: Sequence[tuple[Table, bytes]]) -> list[Any]:
        return [self.get(table, key) for table, key in rows]

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        if table is Table.FEED:
            return self._feed(start)
        bound = upper_bound(prefix)
        low = prefix + start
        if bound is None:
            raw = self._run(self.q.scan_from, (table.value, low), f"scan {table}")
        else:
            raw = self._run(self.q.scan_range, (table.value, low, bound), f"scan {table}")
        kind, rows = VALUE_KINDS[table], []
        mine = self.written.get(table)
        for key, value in raw:
            key = bytes(key)
            if mine is None or key not in mine:
                rows.append((key, decode(kind, bytes(value), db=table, key=key)))
        if mine:  # what this transaction wrote in the range, not sent yet (or sent: alike)
            rows += [(key, value) for key, value in mine.items() if value is not None
                     and key >= low and (bound is None or key < bound)]
            rows.sort(key=lambda row: row[0])
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
        if table is Table.FEED:
            if self.feed_base is None:
                self.feed_base = int(self._committed(
                    lambda conn: conn.execute(self.q.feed.end).fetchall()[0][0],
                    "count the feed"))
            return self.feed_base + self.appended
        self.flush()
        return int(self._run(self.q.size, (table.value,), f"count {table}")[0][0])

    def _feed(self, start: bytes) -> list[tuple[bytes, Any]]:
        """The committed feed from the number ``start`` says: (number key, event key)."""
        after = int.from_bytes(start, "big") - 1 if start else 0
        rows = self._committed(
            lambda conn: conn.execute(self.q.feed.after, (after, after)).fetchall(),
            "read the feed")
        found, kind = [], VALUE_KINDS[Table.EVENTS]
        for n, event, value in rows:
            event = bytes(event)
            found.append((int(n).to_bytes(8, "big"), event))
            if value is not None:  # a missing one is damage: ``Indexed`` reports it
                self.seen[(Table.EVENTS, event)] = decode(kind, bytes(value), db=Table.EVENTS,
                                                          key=event)
        return found

    def _committed(self, read: Callable[[psycopg.Connection[Any]], Any], doing: str) -> Any:
        self._check()
        if self.committed is not None:
            return self.committed(read)
        try:
            return read(self.conn)
        except psycopg.Error as exc:
            raise self._failed(exc, doing) from exc

    # -- writes: queued ------------------------------------------------------------------

    def put(self, table: Table, key: bytes, value: object) -> None:
        self._queue(table, key, value)

    def put_rows(self, rows: Iterable[tuple[Table, bytes, object]]) -> None:
        for table, key, value in rows:
            self._queue(table, key, value)


    def delete(self, table: Table, key: bytes) -> None:
        if self.seen.get((table, key), _UNSEEN) is None:
            return  # known absent: nothing to delete
        self._queue(table, key, None)

    def append_feed(self, event: bytes) -> None:
        # The event's number is given at the commit (``flush``), not here.
        self._check()
        if not self.write:
            raise StorageError("a read transaction cannot append to the feed; use transact")
        self.queue.append(_Append(self.next_idx, bytes(event)))
        self.next_idx += 1
        self.appended += 1

    def _queue(self, table: Table, key: bytes, value: Any) -> None:
        self._check()
        if table is Table.FEED:
            raise StorageError("the feed is appended to (insert), never rewritten")
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
        else:  # written again at this depth: one statement for both
            queued.value = value
        self.seen[row] = value
        self.written.setdefault(table, {})[key] = value
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

    def _statement(self, write: _Write | _Append) -> tuple[str, tuple[Any, ...]] | None:
        if isinstance(write, _Append):
            return self.q.feed.append, (write.idx, write.event)
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
        """Send every queued statement in one pipeline (one round trip)."""
        self._check()
        if not self.queue:
            return
        queue, self.queue, self.latest = self.queue, [], {}
        self.epoch += 1
        asked: psycopg.Cursor[Any] | None = None
        try:
            with self.conn.pipeline():
                for item in queue:
                    if item is _XID:
                        asked = self.conn.execute(item)
                    elif isinstance(item, str):
                        self.conn.execute(item)
                    elif (statement := self._statement(item)) is not None:
                        self.conn.execute(*statement)
            if asked is not None:
                found = asked.fetchone()
                self.xid = None if found is None else str(found[0])
        except psycopg.Error as exc:
            raise self._failed(exc, "write") from exc

    def finish(self) -> None:
        """Send the queue: the last statements before the commit; with them, if the
        transaction appended to the feed, the question of its id (``xid``)."""
        if self.appended:
            self.queue.append(_XID)
        self.flush()

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
                       appended=self.appended, touched=len(self.touched))
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

    def _rewritten(self) -> None:
        """After an undo: the rows written are those the queue still holds (what was sent
        before the undone savepoint, the server holds, and a range read finds there)."""
        self.written = {}
        for item in self.queue:
            if isinstance(item, _Write):
                self.written.setdefault(item.table, {})[item.key] = item.value

    def _undo(self, undone: _Open) -> None:
        for row, was in undone.before.items():
            if was is _UNSEEN:
                self.seen.pop(row, None)
            else:
                self.seen[row] = was
        self.appended = undone.appended
        del self.touched[undone.touched:]
        if self.retry or self.broken or self.done:
            return  # the transaction is lost anyway: transact rolls it all back
        if undone.epoch == self.epoch:  # its SAVEPOINT was never sent: unsay it all
            del self.queue[undone.index:]
            self.latest = {}
            self._rewritten()
            return
        # Everything queued now came after its SAVEPOINT, inside it: drop it, and undo what
        # was sent. ROLLBACK TO keeps the savepoint; RELEASE then drops it, as if it never was.
        self.queue, self.latest = [], {}
        self._rewritten()
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
