"""``LmdbStore``: the Store port on one LMDB environment, durable on every commit by default.

Every ``Table`` lives in one LMDB database, in the one key space of ``keys.stored_key``: a
send's rows are neighbours there, so a commit writes few pages. Within a table LMDB's key
order is the order the port promises, and every read is a point lookup or a prefix range
over one owner's rows: nothing scans history. The port itself (reads, writes, index upkeep) is the
shared ``Indexed``; ``lmdb_txn`` supplies its primitives and savepoints, this module the
environment, its transactions and their commit.

Threads: LMDB admits one writer at a time; the runtime gives the store one writer thread, and
``transact`` serialises any others. Readers may run concurrently on any thread, but a thread
must not hold ``read()`` open across its own ``transact``: growing the map would void it.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import lmdb

from treemail.adapters.store.durability import Durability, lmdb_flags
from treemail.adapters.store.lmdb_files import (
    DATA_FILE,
    LOCK_FILE,
    OwnerLock,
    check_data_file,
)
from treemail.adapters.store.lmdb_format import (
    MAX_DBS,
    META_DB,
    ROWS_DB,
    check_readable,
    settle_format,
)
from treemail.adapters.store.lmdb_txn import (
    Db,
    LmdbTables,
    LmdbTxn,
    Txn,
    abort,
    disk_full,
    failure,
)
from treemail.adapters.store.private import PRIVATE_FILE, private_dir, private_files
from treemail.core.errors import (
    OutcomeUnknown,
    StorageError,
    StoreClosed,
    StoreDamaged,
    StoreFull,
)
from treemail.core.keys import OWNED, Table, logical_key, stored_key, stored_prefix, table_of
from treemail.core.store import ReadTxn, WriteTxn

__all__ = ["LmdbStore"]

T = TypeVar("T")

MiB = 1 << 20


def _cannot_open(directory: Path, exc: lmdb.Error) -> StorageError:
    """LMDB refused to open the store or its tables: typed, naming the store and LMDB's
    reason, for a reader as for the writer."""
    return StorageError(f"cannot open the store at {str(directory)!r}: {exc}",
                        path=str(directory))


def _lmdb_open(directory: Path, **options: object) -> lmdb.Environment:
    try:
        return lmdb.open(str(directory), max_dbs=MAX_DBS, subdir=True, create=False,
                         **options)  # type: ignore[arg-type]
    except lmdb.Error as exc:
        raise _cannot_open(directory, exc) from exc


def _open_tables(env: lmdb.Environment, directory: Path, *, write: bool) -> Any:
    try:
        if not write:  # handles opened by py-lmdb's own read txn outlive it
            return env.open_db(ROWS_DB, create=False)
        with env.begin(write=True) as txn:
            return env.open_db(ROWS_DB, txn=txn)
    except lmdb.NotFoundError:
        env.close()
        raise StoreDamaged(f"{str(directory)!r} holds an LMDB file but not a treemail store "
                           "(a table is missing)", path=str(directory)) from None
    except lmdb.Error as exc:
        env.close()
        raise _cannot_open(directory, exc) from exc


def _table_rows(txn: Txn, db: Db, table: Table) -> Iterator[tuple[bytes, bytes]]:
    """A table's (key, stored bytes) in key order. A table of rows by id or number is one
    range; a session's rows are spread over every session's range, so those are picked out
    of the whole key space (verify and audits only: no hot path lists every owner's rows)."""
    cursor = txn.cursor(db=db)
    if table not in OWNED:
        head = stored_prefix(table, b"")
        if cursor.set_range(head):
            for key, raw in cursor:
                if not key.startswith(head):
                    break
                yield key[len(head):], raw
        return
    found = sorted((logical_key(key)[1], raw) for key, raw in cursor if table_of(key) is table)
    yield from found


def _commit_durably(txn: Txn) -> None:
    txn.commit()  # one seam, so that tests can fail it after the commit point


# py-lmdb has no class for EIO: it raises a plain Error carrying the C library's text for it.
_EIO_TEXT = os.strerror(errno.EIO)


class _MapFull(Exception):
    """An attempt of ``transact`` ran out of map: grow it and run the work again."""


class _ReadGate:
    """Makes map growth wait for read transactions open on other threads.

    ``set_mapsize`` invalidates every transaction of the process, so a concurrent reader
    caught by it would fail mid-read. A thread's own open reads cannot be waited for (that
    would deadlock); they are invalidated, so do not hold ``read()`` across ``transact``.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._growing = False
        self._local = threading.local()

    def _depth(self) -> int:
        depth: int = getattr(self._local, "depth", 0)
        return depth

    @contextmanager
    def reading(self) -> Iterator[None]:
        depth = self._depth()
        with self._cond:
            # A nested read on a thread that already reads must not wait for the grower.
            while self._growing and depth == 0:
                self._cond.wait()
            self._readers += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        own = self._depth()
        with self._cond:
            self._growing = True
            while self._readers > own:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._growing = False
                self._cond.notify_all()


class LmdbStore:
    """The Store port on LMDB. Open with ``LmdbStore.open(path)``."""

    def __init__(self, env: lmdb.Environment, db: Db, max_map_size: int, *,
                 owner: OwnerLock | None = None) -> None:
        self._env = env
        self._owner = owner  # None: opened read-only
        self._db = db
        self._max_map_size = max_map_size
        self._path = env.path()
        self._closed = False
        self._gate = _ReadGate()
        self._write_lock = threading.Lock()
        self._writer: int | None = None
        # The feed's end as the last commit left it (None: unknown), handed to the next write
        # transaction: this store is the one writer, so nothing else moves it in between.
        self._feed_end: int | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = 64 * MiB,
        max_map_size: int = 64 * 1024 * MiB,
        readonly: bool = False,
        durability: Durability | str = Durability.FSYNC,
    ) -> LmdbStore:
        """Open (creating if needed) the store in directory ``path``, as its one writer.

        ``sync=False`` trades durability of the last commits for speed: benchmarks and tests
        only. The map starts at ``map_size`` and doubles on demand up to ``max_map_size``.
        ``readonly=True`` opens an existing store to read only: it creates nothing, writes
        nothing and takes no owner lock, so it works beside the writer. Either way a damaged
        ``data.mdb`` raises ``StoreDamaged`` instead of being mapped; a second writer gets
        ``StoreLocked`` naming the holder's pid. ``durability`` is ``fsync`` (a commit
        survives power loss) or ``process`` (a process crash; see ``durability.py``).
        """
        if max_map_size < map_size:
            raise ValueError(f"max_map_size {max_map_size} is below map_size {map_size}")
        flags = lmdb_flags(durability, sync)  # an unknown mode fails before anything is made
        directory = Path(path)
        if readonly:
            return cls._open_readonly(directory)
        # Private before anything is written into it: see private.py for what is repaired
        # and what is refused.
        private_dir(directory, markers=(DATA_FILE,))
        private_files(directory)
        owner = OwnerLock(directory)
        env: lmdb.Environment | None = None
        try:
            if (directory / DATA_FILE).exists():
                check_data_file(directory)
            # writemap stays off: LMDB does not support nested transactions with it. LMDB
            # creates data.mdb and lock.mdb itself, with this mode.
            env = _lmdb_open(directory, map_size=map_size, **flags,
                             writemap=False, lock=True, mode=PRIVATE_FILE)
            # A process killed while another kept the store open leaves reader slots that
            # pin old pages; clear them so the file does not grow behind dead readers.
            env.reader_check()
            db = _open_tables(env, directory, write=True)
            settle_format(env, db, env.open_db(META_DB), directory, max_map_size=max_map_size)
        except BaseException:
            # A refused or failed upgrade must not keep the environment open: LMDB allows one
            # per path and process, so the next open would fail for that and not say why.
            if env is not None:
                env.close()
            owner.release()
            raise
        return cls(env, db, max_map_size, owner=owner)

    @classmethod
    def _open_readonly(cls, directory: Path) -> LmdbStore:
        header = check_data_file(directory)
        # LMDB would create a missing lock file; without one no writer has the store open, so
        # reading lockless is safe. With one, the reader table keeps a live writer from
        # recycling pages under our reads (that table is shared memory, not the store).
        locked = (directory / LOCK_FILE).exists()
        env = _lmdb_open(directory, map_size=header.map_size, readonly=True, lock=locked)
        try:
            check_readable(env, directory)
        except lmdb.Error as exc:  # a foreign LMDB file's main database, say (see the test)
            env.close()
            raise _cannot_open(directory, exc) from exc
        except BaseException:
            env.close()
            raise
        db = _open_tables(env, directory, write=False)
        return cls(env, db, header.map_size)

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check_open()
        with self._gate.reading():
            txn = self._begin_read()
            try:
                yield LmdbTxn(self._env, txn, self._db)
            finally:
                abort(txn)

    def _begin_read(self) -> Txn:
        try:
            return self._env.begin(write=False)
        except lmdb.MapResizedError:
            # Another process (the writer, when we only read) grew the map: adopt its size.
            # This maps more of the file into this process; the file is not written.
            with suppress(lmdb.Error):
                self._env.set_mapsize(0)
        except lmdb.Error as exc:  # a full reader table, say: typed like every store failure
            raise failure(exc, "begin a read transaction") from exc
        try:
            return self._env.begin(write=False)
        except lmdb.Error as exc:
            raise failure(exc, "begin a read transaction") from exc

    @contextmanager
    def raw_rows(self) -> Iterator[Callable[[Table], Iterator[tuple[bytes, bytes]]]]:
        """Each table's stored (key, value) bytes, undecoded, from one consistent snapshot:
        for ``treemail verify``, which must see a damaged record without stopping at it."""
        self._check_open()
        with self._gate.reading():
            txn = self._begin_read()

            def rows(table: Table) -> Iterator[tuple[bytes, bytes]]:
                try:
                    yield from _table_rows(txn, self._db, table)
                except lmdb.Error as exc:
                    raise failure(exc, f"scan {table}") from exc

            try:
                yield rows
            finally:
                abort(txn)

    def write_raw(self, table: Table, key: bytes, raw: bytes | None) -> None:
        """Store ``raw`` bytes (None deletes) as row ``key`` of ``table``, unchecked: for tests
        and tools that must make a store damaged in a precise way."""
        self._check_open()
        with self._write_lock, self._env.begin(write=True) as txn:
            self._feed_end = None  # the raw row may be the feed's
            stored = stored_key(table, key)
            if raw is None:
                txn.delete(stored, db=self._db)
            else:
                txn.put(stored, raw, db=self._db)

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        """Run ``work`` in one write transaction; re-run it from scratch on a larger map
        whenever LMDB reports the map full, so a full map never fails a send."""
        writer = threading.get_ident()
        if self._writer == writer:  # ``_check_not_writing``, with the id it needs here too
            raise StorageError("transact called from inside transact; use txn.savepoint()")
        with self._write_lock:
            self._writer = writer
            try:
                while True:
                    try:
                        return self._attempt(work)
                    except _MapFull:
                        self._grow()
            finally:
                self._writer = None

    def _attempt(self, work: Callable[[WriteTxn], T]) -> T:
        if self._closed:  # ``_check_open``, called only to raise: every send attempts
            self._check_open()
        if self._owner is None:
            raise StorageError(f"the store at {self._path!r} was opened read-only; open it "
                               "without readonly=True to write", path=self._path)
        try:
            txn = self._env.begin(write=True)
        except lmdb.Error as exc:
            raise failure(exc, "begin a write transaction") from exc
        writes = LmdbTxn(self._env, txn, self._db, self._feed_end)
        try:
            result = work(writes)
            writes.tables.flush()
            if not writes.tables.map_full:
                self._feed_end = None  # until the commit is known to have happened
                number = txn.id()  # what tells, after a failed commit, whether it passed
                try:
                    _commit_durably(txn)
                except lmdb.Error as exc:
                    self._commit_failed(exc, number, writes.tables)
                self._feed_end = writes.tables.feed_end
                return result
        except Exception:
            abort(txn)
            # Once the map filled up the txn is broken, so whatever error followed is moot.
            if writes.tables.map_full:
                raise _MapFull from None
            raise
        except BaseException:
            abort(txn)
            raise
        abort(txn)  # work swallowed a MapFullError: what it did is incomplete
        raise _MapFull

    def _commit_failed(self, exc: lmdb.Error, number: int, tables: LmdbTables) -> NoReturn:
        """Say precisely how the failed commit of transaction ``number`` left the store
        (called only on a failure: every commit would pay for a call to a function that
        wraps it).

        LMDB writes the data pages, syncs them, and only then writes the meta page that makes
        the transaction visible: the commit point. Whether it was passed is read back from
        the environment's last transaction id. A failure before it (a full disk, reported as
        ENOSPC or, for a short page write, EIO) stored nothing; any other error is reported as
        an unknown outcome, since a torn meta write cannot be told from a good one until the
        next open.
        """
        if isinstance(exc, lmdb.MapFullError):  # commit writes the free list: it can fill
            tables.map_full = True
            raise exc
        try:
            committed: bool | None = self._env.info()["last_txnid"] >= number
        except lmdb.Error:
            committed = None
        if committed is False:
            # The meta page was not written, so nothing is stored. On a full disk LMDB
            # reports a short data-page write as EIO, not as ENOSPC.
            if isinstance(exc, lmdb.DiskError) or _EIO_TEXT in str(exc):
                raise disk_full(exc) from exc
            raise StorageError(f"the store at {self._path!r} failed to commit ({exc}) "
                               "before the commit point: nothing of this operation was "
                               "stored; retry it", path=self._path) from exc
        raise OutcomeUnknown(
            f"the store at {self._path!r} failed after the commit point ({exc}): the "
            "operation may or may not be stored. Retry the same tool call with the same "
            "tool-call id: a stored send is answered with its original result.",
            path=self._path) from exc

    def _grow(self) -> None:
        size = self._env.info()["map_size"]
        if size >= self._max_map_size:
            raise StoreFull(
                f"the store at {self._path!r} is full: its map reached max_map_size "
                f"({self._max_map_size} bytes), and nothing of this operation was stored; "
                "open it with a larger max_map_size",
                path=self._path,
            )
        with self._gate.exclusive():
            try:
                self._env.set_mapsize(min(size * 2, self._max_map_size))
            except lmdb.Error as exc:
                raise failure(exc, "grow the map") from exc

    def own(self, holder: Mapping[str, str]) -> None:
        """The port's ownership: a writer holds the owner lock since ``open``; record
        ``holder`` in it, for a refused second opener (a daemon: its role, socket)."""
        self._check_open()
        if self._owner is None:
            raise StorageError(f"the store at {self._path!r} was opened read-only; open it "
                               "without readonly=True to own it", path=self._path)
        self._owner.describe(holder)

    def close(self) -> None:
        """Close the environment; later use of the store raises ``StorageError``."""
        self._check_not_writing("close", "close it after transact returns")
        with self._write_lock:  # let a running transaction finish first
            if not self._closed:
                self._closed = True
                self._env.close()
                if self._owner is not None:
                    self._owner.release()

    def _check_not_writing(self, call: str, advice: str) -> None:
        # LMDB would block this thread on its own writer lock forever.
        if self._writer == threading.get_ident():
            raise StorageError(f"{call} called from inside transact; {advice}")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store at {self._path!r} is closed; open it again",
                              path=self._path)
