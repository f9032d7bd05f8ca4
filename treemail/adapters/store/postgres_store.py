"""``PostgresStore``: the Store port on a PostgreSQL database (psycopg 3), one schema a store.

Open it with ``treemail.open_store("postgresql://USER@HOST/DB?schema=NAME")`` (the URL's
parameters: ``postgres_url``); the layout and its versions are in ``postgres_schema``, the
statements in ``postgres_sql``, the primitives and savepoints in ``postgres_txn``, the owner
lock in ``postgres_owner`` and the fence in ``postgres_fence``.
Records are the codec's bytes (JSON and a checksum) under the key bytes of
``treemail.core.keys``, exactly as in LMDB, so ``treemail verify`` checks both alike.

Transactions. One ``transact`` is one PostgreSQL transaction on a writer's connection, run
at REPEATABLE READ (snapshot isolation); a savepoint is a SQL ``SAVEPOINT``. Several threads
may run ``transact`` at once, each on a connection of its own (``postgres_writers``: several
for daemons sharing the store, one for a store held alone). Nothing every write touches is
left to serialise them: no row counts, and the feed takes its numbers after the commit
(``postgres_feed``), so transactions of different trees share no row and commit side by
side, daemons' alike; no lock of the store's is taken around them.

Why REPEATABLE READ, and neither SERIALIZABLE (what this store ran when its writes were
serial anyway) nor READ COMMITTED with row locks. What must not interleave is the work of
one tree: a guard reads a count and writes it back (a recipient's tally, a pair's count,
the replay index, a handle), and the tree's state decides what a send may do. Those are
kept apart before they reach the server: a tree has one owner (its lease, fenced below),
whose writer runs the tree's calls in one lane, one after the other (``Writer``). What is
left is rows several trees write (the session counter, new keys), and there snapshot
isolation is exact: two transactions that update one row, or insert one key, cannot both
commit (the second fails with a serialization failure or a unique violation, and
``transact`` runs it again from scratch on a fresh snapshot: the port lets a store do
that). SERIALIZABLE would also order transactions that share no row through what they read:
its predicate locks are taken per page of the one ``rows`` table and, past a few dozen in a
transaction (a group commit reads hundreds of rows), for the whole table, so concurrent
transactions of different trees kept failing each other (measured: two daemons on four
trees failed sends after ten attempts). READ COMMITTED would need a lock on every row read
before it, including rows not there yet (an idempotency key not stored). The fence is the
one read another transaction's write must not slip past: it locks the lease rows it reads
(``FOR SHARE``), so a takeover that raises a token waits for this transaction, or this one
fails and runs again to find the new token.
Readers get REPEATABLE READ READ ONLY: one snapshot, as an LMDB read transaction.

Ownership. A writer holds a session-level advisory lock of the server, keyed by the schema,
on the very connection it writes through, for as long as the store is open. Opened
``shared`` (what a daemon does), it holds the lock shared: any number of daemons serve the
store together, each owning its trees through leases with fencing tokens
(``postgres_leases``), and every write transaction checks, inside itself, that each tree it
writes is leased to its writer (``postgres_fence``), else it is refused with ``store:fenced``
and stores nothing; in a group commit, only the operations that wrote such a tree fail.
Opened alone (an embedded writer, a tool), it holds the lock exclusively: it owns every
tree, and is refused with ``store:locked`` while daemons share the store, as they are while
it holds it. The server drops the lock with the connection, however the holder dies;
after a lost connection the store takes it again before it writes anything.

Failures. A serialization failure or deadlock, or a connection lost before the commit was
sent, leaves nothing stored: the work runs again (on a new connection if need be), up to
``ATTEMPTS`` times. A connection lost while committing may or may not have committed: that
is ``OutcomeUnknown``, as an LMDB failure after its commit point.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from treemail.adapters.store.codec import encode
from treemail.adapters.store.postgres_feed import number
from treemail.adapters.store.postgres_fence import Fence, Refuse
from treemail.adapters.store.postgres_leases import PgLeases
from treemail.adapters.store.postgres_owner import Owner
from treemail.adapters.store.postgres_schema import FEED_SPACE, lock_key, settle
from treemail.adapters.store.postgres_sql import Queries
from treemail.adapters.store.postgres_txn import RETRYABLE, PgTables, PgTxn, lost
from treemail.adapters.store.postgres_url import (
    DEFAULT_SCHEMA,
    WRITERS,
    shown,
    split_url,
    url_writers,
)
from treemail.adapters.store.postgres_writers import Numberer, Slot, Writers
from treemail.core.errors import OutcomeUnknown, StorageError, StoreClosed
from treemail.core.keys import Table
from treemail.core.store import ReadTxn, WriteTxn

__all__ = ["ATTEMPTS", "DEFAULT_SCHEMA", "WRITERS", "PostgresStore", "split_url", "url_writers"]

T = TypeVar("T")

ATTEMPTS = 10
_READERS = 4  # pooled read connections: readers on several threads at once
# How long a commit that appended to the feed waits for its events to show there.
VISIBLE_WAIT = 1.0


class _Retry(Exception):
    """An attempt of ``transact`` stored nothing and may run again (reconnecting if ``lost``)."""

    def __init__(self, cause: BaseException, *, lost: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.lost = lost


class PostgresStore:
    """The Store port on PostgreSQL. Open with ``PostgresStore.open(url)``."""

    # How long the runtime's group commit keeps taking queued calls into one transaction:
    # each call here costs round trips, so a batch needs longer than on LMDB to gather.
    batch_wait = 0.05

    def __init__(self, conninfo: str, schema: str, where: str, *, readonly: bool,
                 synchronous: bool, shared: bool = False, writers: int = WRITERS) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._where = where  # for messages: the URL without its password
        self._readonly = readonly
        self._synchronous = synchronous
        self._closed = False
        self._local = threading.local()  # ``inside``: this thread runs a transaction
        self._holder: dict[str, str] = {}
        self._queries: Queries | None = None
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._shared = shared and not readonly
        # How many transactions may run at once (the runtime's writer runs that many
        # threads): an exclusive owner lock is one connection's.
        self.writers = writers if self._shared else 1
        self._owner = Owner(schema, where, shared=self._shared)
        self._writers = Writers(self.writers, where, self._owner.release)
        self._numberer = Numberer(lambda: self._dial(autocommit=True), self._number,
                                  self._unnumbered)
        # The leases of trees, when daemons share the store (``leases.leases_of``).
        self.tree_leases = PgLeases(conninfo, schema, where) if self._shared else None
        self._fence = Fence(self.tree_leases, schema, where)

    @classmethod
    def open(cls, url: str, *, readonly: bool = False, durability: str = "fsync",
             sync: bool = True, shared: bool = False) -> PostgresStore:
        """Open (as a writer, creating if needed) the store of ``url``. ``durability``
        ``fsync`` waits for the server to flush each commit (``synchronous_commit = on``);
        ``process`` does not (``off``): a commit survives our process dying, while a crash
        of the server's machine may lose the last ones (never corrupting the store).
        ``shared``: beside other daemons, each owning its trees through leases."""
        from treemail.adapters.store.durability import Durability, lmdb_flags

        lmdb_flags(durability, sync)  # an unknown mode fails as it does for LMDB
        conninfo, schema = split_url(url)
        store = cls(conninfo, schema, shown(url), readonly=readonly,
                    synchronous=sync and Durability(durability) is Durability.FSYNC,
                    shared=shared, writers=url_writers(url))
        try:
            store._start()
        except BaseException:
            store.close()
            raise
        return store

    def _start(self) -> None:
        if not self._readonly:
            self._writers.add(self._connect_writer())
        else:
            with self._connection() as conn:
                settle(conn, self._schema, self._where, write=False)
                self._queries = Queries.of(self._schema, conn)
        self._pool = ConnectionPool(self._conninfo, min_size=1, max_size=_READERS,
                                    configure=_reader, check=ConnectionPool.check_connection,
                                    open=False, name=f"treemail-{self._schema}")
        self._pool.open(wait=False)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._dial(autocommit=False)
        try:
            yield conn
        finally:
            conn.close()

    def _dial(self, *, autocommit: bool) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._conninfo, autocommit=autocommit,
                                   application_name="treemail")
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to the store at {self._where!r}: {exc}",
                               path=self._where) from exc

    def _connect_writer(self) -> psycopg.Connection[Any]:
        """A connection that holds the store's owner lock, with the schema settled."""
        conn = self._dial(autocommit=True)
        try:
            if not self._owner.take(conn):
                raise self._owner.locked(conn)
            conn.autocommit = False
            settle(conn, self._schema, self._where, write=True)
            self._queries = Queries.of(self._schema, conn)
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            if not self._synchronous:
                conn.execute("SET synchronous_commit = off")
                conn.commit()
            if not self._shared:
                self._owner.describe(conn, self._holder)
        except psycopg.Error as exc:
            conn.close()
            raise StorageError(f"cannot open the store at {self._where!r}: {exc}",
                               path=self._where) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    # -- the port ------------------------------------------------------------------------

    def _number(self, conn: psycopg.Connection[Any]) -> int:
        return number(conn, self._q().feed, (FEED_SPACE, lock_key(self._schema)))

    def _unnumbered(self, conn: psycopg.Connection[Any]) -> bool:
        found = conn.execute(self._q().feed.waiting).fetchone()
        return bool(found and found[0])

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        with self._reading() as conn:
            tables = PgTables(conn, self._q(), write=False)
            try:
                yield PgTxn(tables)
            finally:
                tables.done = True

    @contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        self._check_open()
        assert self._pool is not None
        try:
            with self._pool.connection(timeout=60) as conn:
                yield conn
        except PoolTimeout as exc:
            raise StorageError(f"no connection to the store at {self._where!r} within 60 s: "
                               f"{exc}", path=self._where) from exc
        except psycopg.Error as exc:
            raise StorageError(f"postgresql failed to read the store at {self._where!r}: "
                               f"{exc}", path=self._where) from exc

    @contextmanager
    def raw_rows(self) -> Iterator[Callable[[Table], Iterable[tuple[bytes, bytes]]]]:
        """Each table's stored (key, value) bytes, undecoded, from one snapshot: for
        ``treemail verify``, which must see a damaged record without stopping at it."""
        with self._reading() as conn:
            query = self._q().all_rows

            def rows(table: Table) -> Iterable[tuple[bytes, bytes]]:
                if table is Table.FEED:  # as a reader numbers it, each entry under its number
                    numbered = conn.execute(self._q().feed.after, (0, 0)).fetchall()
                    return [(key := int(n).to_bytes(8, "big"), encode(bytes(event), key))
                            for n, event, _ in numbered]
                found = conn.execute(query, (table.value,)).fetchall()
                return [(bytes(key), bytes(value)) for key, value in found]

            yield rows

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        """Run ``work`` in one REPEATABLE READ transaction and commit it; run it again from
        scratch after a serialization failure, a unique violation (a key another
        transaction stored first) or a connection lost before the commit."""
        if getattr(self._local, "inside", False):
            raise StorageError("transact called from inside transact; use txn.savepoint()")
        self._check_writable()
        with self._writers.lend() as slot:
            self._local.inside = True
            try:
                return self._transact(slot, work)
            finally:
                self._local.inside = False

    def _transact(self, slot: Slot, work: Callable[[WriteTxn], T]) -> T:
        refused: frozenset[str] = frozenset()
        for attempt in range(ATTEMPTS):
            try:
                return self._attempt(slot, work, refused)
            except Refuse as fenced:
                refused |= fenced.trees
                continue  # no pause: nothing conflicted, the next attempt refuses them
            except _Retry as again:
                if again.lost:
                    self._writers.drop(slot)
                if attempt == ATTEMPTS - 1:
                    raise StorageError(
                        f"the store at {self._where!r} refused the transaction {ATTEMPTS} "
                        f"times ({again.cause}); nothing of this operation was stored: retry "
                        "it later", path=self._where) from again.cause
                time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** attempt)))
        raise StorageError(f"the store at {self._where!r} fenced the transaction {ATTEMPTS} "
                           "times; nothing of this operation was stored: retry it later",
                           path=self._where)

    def _attempt(self, slot: Slot, work: Callable[[WriteTxn], T],
                 refused: frozenset[str]) -> T:
        conn = self._writer_connection(slot)
        tables = PgTables(conn, self._q(), write=True, committed=self._committed)
        tables.refused = refused
        born: set[str] = set()
        try:
            try:
                result = work(PgTxn(tables))
                if not tables.retry:
                    self._wake_listeners(tables)
                    born = self._fence.check(tables)
                    tables.finish()
            finally:
                tables.done = True
        except BaseException as exc:
            self._rollback(slot)
            if tables.retry:
                raise _Retry(exc, lost=conn.closed or conn.broken) from None
            raise
        if tables.retry:  # the work swallowed a failure: what it did is incomplete
            self._rollback(slot)
            raise _Retry(StorageError("a failure inside the work was swallowed"),
                         lost=conn.closed or conn.broken)
        self._commit(slot)
        if born and self.tree_leases is not None:
            self.tree_leases.born(born)
        if tables.xid is not None:
            self._until_visible(slot, tables.xid)
            self._numberer.due()
        return result

    def _until_visible(self, slot: Slot, xid: str) -> None:
        """Return once the feed shows what the transaction ``xid`` appended: once every
        transaction older than it has ended (``postgres_feed``'s horizon), which takes
        milliseconds, as treemail's own transactions last that long. So a reader that starts
        after ``transact`` returned sees its events, as on LMDB. Past ``VISIBLE_WAIT`` (a
        long transaction of someone else's holds the horizon back) it returns anyway: the
        events are stored, and show when that transaction ends."""
        conn = slot.conn
        if conn is None:
            return
        deadline = time.monotonic() + VISIBLE_WAIT
        pause = 0.0005
        conn.autocommit = True  # one round trip a look, no transaction left to end
        try:
            while True:
                row = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot()) > "
                                   "%s::xid8", (xid,)).fetchone()
                if (row is not None and row[0]) or time.monotonic() > deadline:
                    return
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
        except psycopg.Error:  # committed already: only the wait is cut short
            self._writers.drop(slot)
        finally:
            if slot.conn is not None:
                slot.conn.autocommit = False

    def _committed(self, read: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``read`` on a reader's connection: the committed store, apart from a write."""
        with self._reading() as conn:
            return read(conn)

    def _wake_listeners(self, tables: PgTables) -> None:
        """Tell the other daemons' listeners the feed grew: a NOTIFY queued with the writes
        (sent in their pipeline, delivered only if this transaction commits)."""
        if self.tree_leases is not None and self.tree_leases.notifying and tables.appended:
            tables.also(self.tree_leases.notify("w"))

    def _commit(self, slot: Slot) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            conn.commit()
        except RETRYABLE as exc:  # a conflict found at the commit: nothing was stored
            self._rollback(slot)
            raise _Retry(exc, lost=False) from None
        except psycopg.Error as exc:
            if lost(exc):
                raise OutcomeUnknown(
                    f"the connection to the store at {self._where!r} was lost while it "
                    f"committed ({exc}): the operation may or may not be stored. Retry the "
                    "same tool call with the same tool-call id: a stored send is answered "
                    "with its original result.", path=self._where) from exc
            self._rollback(slot)
            raise StorageError(f"the store at {self._where!r} refused the commit ({exc}): "
                               "nothing of this operation was stored", path=self._where) from exc

    def _rollback(self, slot: Slot) -> None:
        conn = slot.conn
        if conn is None or conn.closed or conn.broken:
            return  # the server ended the transaction with the connection
        try:
            conn.rollback()
        except psycopg.Error:
            self._writers.drop(slot)

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise StorageError(f"the store at {self._where!r} was opened read-only; open it "
                               "without readonly=True to write", path=self._where)

    def _writer_connection(self, slot: Slot) -> psycopg.Connection[Any]:
        self._check_open()
        if slot.conn is None or slot.conn.closed or slot.conn.broken:
            # A new connection must win the owner lock again before it writes: if another
            # writer took the store meanwhile, this one is refused (StoreLocked).
            self._writers.drop(slot)
            slot.conn = self._connect_writer()
        return slot.conn

    def _q(self) -> Queries:
        if self._queries is None:
            raise StoreClosed(f"the store at {self._where!r} is closed; open it again",
                              path=self._where)
        return self._queries

    def own(self, holder: Mapping[str, str]) -> None:
        """The port's ownership: a writer holds the owner lock since ``open``; record
        ``holder`` in the ``owner`` row, for a refused second opener. Shared, the store is
        owned tree by tree (``tree_leases``), and the members table says who shares it."""
        if getattr(self._local, "inside", False):
            raise StorageError("own called from inside transact; call it outside")
        self._check_writable()
        self._holder = dict(holder)
        if self._shared:
            return
        with self._writers.lend() as slot:
            conn = self._writer_connection(slot)
            try:
                self._owner.describe(conn, self._holder)
            except psycopg.Error as exc:
                self._rollback(slot)
                raise StorageError(f"cannot record the owner of {self._where!r}: {exc}",
                                   path=self._where) from exc

    def close(self) -> None:
        """Close the connections (releasing the owner lock); later use raises."""
        if getattr(self._local, "inside", False):
            raise StorageError("close called from inside transact; close it after transact "
                               "returns")
        if self._closed:
            return
        self._writers.close()  # lets the running transactions finish first
        self._closed = True
        self._numberer.close()
        if self.tree_leases is not None:
            self.tree_leases.close()
        if self._pool is not None:
            self._pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store at {self._where!r} is closed; open it again",
                              path=self._where)


def _reader(conn: psycopg.Connection[Any]) -> None:
    """A pooled connection reads one snapshot per ``read`` and never writes."""
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
