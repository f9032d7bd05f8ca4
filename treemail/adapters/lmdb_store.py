"""``LmdbStore``: the Store port on one LMDB environment, durable on every commit by default.

Each table of ``MemoryStore`` is a named LMDB database. Index keys put the owner first and a
big-endian number last, so LMDB's key order is the order the port promises and every read is
a point lookup or a prefix range over one owner's rows: nothing scans history.

Threads: LMDB admits one writer at a time; the runtime gives the store one writer thread, and
``transact`` serialises any others. Readers may run concurrently on any thread, but a thread
must not hold ``read()`` open across its own ``transact``: growing the map would void it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TypeAlias, TypeVar

import lmdb

from treemail.adapters.codec import decode, encode
from treemail.core.errors import StorageError
from treemail.core.records import (
    Approval,
    Event,
    IdempotencyKey,
    Message,
    Run,
    SendResult,
    Session,
)
from treemail.core.store import ReadTxn, WriteTxn

__all__ = ["LmdbStore"]

T = TypeVar("T")
R = TypeVar("R")
_Txn: TypeAlias = "lmdb.Transaction[bytes]"
_Dbs: TypeAlias = "Mapping[str, lmdb._Database]"

MiB = 1 << 20
# Records, then the indexes and counters that keep every read a lookup or a short range.
_DBS: tuple[str, ...] = ("sessions", "runs", "messages", "replay", "events")
_DBS += ("tree", "handles", "pending", "counters", "last_seq", "feed", "approvals")

# Why a NUL separator: key parts are UUIDs, handles and tool-call ids, none of which contains
# NUL (UTF-8 never yields a 0 byte for anything but U+0000, which we refuse). So ``id + SEP``
# is a prefix no other id's keys share, and ids of any length stay possible.
SEP = b"\x00"
_U64_LIMIT = 1 << 64


def _part(text: str) -> bytes:
    raw = text.encode()
    if SEP in raw:
        raise StorageError(f"a store key cannot contain NUL: {text!r}")
    return raw


def _u64(number: int) -> bytes:
    # Big-endian, so byte order is numeric order within a prefix.
    if not 0 <= number < _U64_LIMIT:
        raise StorageError(f"a store sequence number must fit in 64 unsigned bits: {number}")
    return number.to_bytes(8, "big")


def _key(*parts: str) -> bytes:
    return SEP.join(_part(p) for p in parts)


def _failure(exc: lmdb.Error, doing: str) -> StorageError:
    return StorageError(f"lmdb failed to {doing}: {exc}")


class _LmdbTxn:
    """The reads, over the innermost transaction of ``stack`` (a write txn nests savepoints)."""

    def __init__(self, stack: list[_Txn], dbs: _Dbs) -> None:
        self._stack = stack
        self._dbs = dbs

    # -- primitives: the only places lmdb is called ------------------------------------------

    def _get(self, kind: type[R], db: str, key: bytes) -> R | None:
        try:
            raw = self._stack[-1].get(key, db=self._dbs[db])
        except lmdb.Error as exc:
            raise _failure(exc, f"read {db}") from exc
        return None if raw is None else decode(kind, raw, db=db, key=key)

    def _range(self, kind: type[R], db: str, prefix: bytes, start: bytes = b"") -> list[R]:
        """Values of ``db`` under ``prefix`` from ``prefix + start`` on, in key order."""
        rows: list[R] = []
        try:
            with self._stack[-1].cursor(db=self._dbs[db]) as cursor:
                if not cursor.set_range(prefix + start):
                    return rows
                for key, raw in cursor:
                    if not key.startswith(prefix):
                        break
                    rows.append(decode(kind, raw, db=db, key=key))
        except lmdb.Error as exc:
            raise _failure(exc, f"scan {db}") from exc
        return rows

    def _follow(self, kind: type[R], db: str, key: bytes) -> R:
        """A record an index points at; a dangling index entry is damage, not absence."""
        found = self._get(kind, db, key)
        if found is None:
            raise StorageError(f"an index points at {key!r}, missing from database {db!r}")
        return found

    # -- ReadTxn ---------------------------------------------------------------------------

    def session(self, session_id: str) -> Session | None:
        return self._get(Session, "sessions", _part(session_id))

    def sessions(self) -> Iterator[Session]:
        # Sorted rather than indexed: listing every session is not on any hot path.
        return iter(sorted(self._range(Session, "sessions", b""), key=lambda s: s.ordinal))

    def tree(self, root_session_id: str) -> Iterator[Session]:
        ids = self._range(str, "tree", _key(root_session_id) + SEP)
        return (self._follow(Session, "sessions", _part(sid)) for sid in ids)

    def handle_owner(self, root_session_id: str, handle: str) -> str | None:
        return self._get(str, "handles", _key(root_session_id, handle))

    def run(self, run_id: str) -> Run | None:
        return self._get(Run, "runs", _part(run_id))

    def message(self, message_id: str) -> Message | None:
        return self._get(Message, "messages", _part(message_id))

    def pending(self, recipient: str) -> Iterator[Message]:
        # The ids are read now, as MemoryStore does, so the caller may rewrite messages
        # while iterating (consuming them drops their index entries under the cursor).
        ids = self._range(str, "pending", _key(recipient) + SEP)
        return (self._follow(Message, "messages", _part(mid)) for mid in ids)

    def count(self, name: str) -> int:
        return self._get(int, "counters", _part(name)) or 0

    def recall(self, key: IdempotencyKey) -> SendResult | None:
        return self._get(SendResult, "replay", _replay_key(key))

    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        first = max(after + 1, 1)
        if first >= _U64_LIMIT:
            return iter(())
        return iter(self._range(Event, "events", _key(session_id) + SEP, _u64(first)))

    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        # Feed values are raw event keys, so the global order costs one small row per event.
        rows: list[tuple[int, bytes]] = []
        try:
            with self._stack[-1].cursor(db=self._dbs["feed"]) as cursor:
                if cursor.set_range(_u64(max(after, 0) + 1)):
                    rows = [(int.from_bytes(k, "big"), bytes(v)) for k, v in cursor]
        except lmdb.Error as exc:
            raise _failure(exc, "scan feed") from exc
        return ((number, self._follow(Event, "events", key)) for number, key in rows)

    def feed_end(self) -> int:
        try:
            with self._stack[-1].cursor(db=self._dbs["feed"]) as cursor:
                return int.from_bytes(cursor.key(), "big") if cursor.last() else 0
        except lmdb.Error as exc:
            raise _failure(exc, "read the feed's end") from exc

    def approval(self, approval_id: str) -> Approval | None:
        return self._get(Approval, "approvals", _part(approval_id))

    def approvals(self) -> Iterator[Approval]:
        return iter(self._range(Approval, "approvals", b""))


def _replay_key(key: IdempotencyKey) -> bytes:
    return _key(key.session_id, key.run_id, key.tool_call_id)


class _LmdbWriteTxn(_LmdbTxn):
    """The writes. ``map_full`` records that LMDB ran out of map at any depth, even if the
    work swallowed the error, so that ``transact`` retries instead of committing half."""

    map_full = False

    def __init__(self, env: lmdb.Environment, txn: _Txn, dbs: _Dbs) -> None:
        super().__init__([txn], dbs)
        self._env = env

    def _put(self, db: str, key: bytes, value: object) -> None:
        self._write(db, key, encode(value))

    def _delete(self, db: str, key: bytes) -> None:
        self._write(db, key, None)

    def _write(self, db: str, key: bytes, raw: bytes | None) -> None:
        txn, table = self._stack[-1], self._dbs[db]
        try:
            if raw is None:
                txn.delete(key, db=table)
            else:
                txn.put(key, raw, db=table)
        except lmdb.MapFullError:  # a delete can split pages too
            self.map_full = True
            raise
        except lmdb.Error as exc:
            raise _failure(exc, f"write {db}") from exc

    # -- WriteTxn --------------------------------------------------------------------------

    def put_session(self, session: Session) -> None:
        old = self.session(session.session_id)
        if old is not None and old.handle is not None:
            self._delete("handles", _key(old.root_session_id, old.handle))
        self._put("sessions", _part(session.session_id), session)
        tree_key = _key(session.root_session_id) + SEP + _u64(session.ordinal)
        self._put("tree", tree_key, session.session_id)
        if session.handle is not None and session.live:
            handle_key = _key(session.root_session_id, session.handle)
            self._put("handles", handle_key, session.session_id)

    def put_run(self, run: Run) -> None:
        self._put("runs", _part(run.run_id), run)

    def put_message(self, message: Message) -> None:
        self._put("messages", _part(message.message_id), message)
        key = _key(message.recipient) + SEP + _u64(message.seq)
        if message.pending:
            self._put("pending", key, message.message_id)
        else:
            self._delete("pending", key)

    def add(self, name: str, delta: int) -> int:
        value = self.count(name) + delta
        if value:
            self._put("counters", _part(name), value)
        else:
            self._delete("counters", _part(name))
        return value

    def remember(self, key: IdempotencyKey, result: SendResult) -> None:
        self._put("replay", _replay_key(key), result)

    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        # last_seq makes the next number an O(1) lookup instead of a seek to the log's end.
        seq = (self._get(int, "last_seq", _part(session_id)) or 0) + 1
        event = Event(session_id, seq, kind, dict(data))
        key = _key(session_id) + SEP + _u64(seq)
        self._put("last_seq", _part(session_id), seq)
        self._put("events", key, event)
        self._write("feed", _u64(self.feed_end() + 1), key)
        return event

    def put_approval(self, approval: Approval) -> None:
        self._put("approvals", _part(approval.approval_id), approval)

    @contextmanager
    def savepoint(self) -> Iterator[WriteTxn]:
        # A nested LMDB txn. While it is open its parent must not be touched (MDB_BAD_TXN),
        # so this object reads and writes through the child until the block ends: both the
        # yielded txn and the outer name keep working, exactly as with MemoryStore.
        try:
            child = self._env.begin(write=True, parent=self._stack[-1])
        except lmdb.Error as exc:
            raise _failure(exc, "open a savepoint") from exc
        self._stack.append(child)
        try:
            yield self
        except BaseException:
            self._stack.pop()
            _abort(child)
            raise
        self._stack.pop()
        _commit(child, self)


def _commit(txn: _Txn, owner: _LmdbWriteTxn) -> None:
    try:
        txn.commit()
    except lmdb.MapFullError:  # commit writes the free list and can run out of map too
        owner.map_full = True
        raise
    except lmdb.Error as exc:
        raise _failure(exc, "commit") from exc


def _abort(txn: _Txn) -> None:
    # Aborting a transaction LMDB already invalidated fails; that must not mask the cause.
    with suppress(lmdb.Error):
        txn.abort()


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

    def __init__(self, env: lmdb.Environment, dbs: _Dbs, max_map_size: int) -> None:
        self._env = env
        self._dbs = dbs
        self._max_map_size = max_map_size
        self._path = env.path()
        self._closed = False
        self._gate = _ReadGate()
        self._write_lock = threading.Lock()
        self._writer: int | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = 64 * MiB,
        max_map_size: int = 64 * 1024 * MiB,
    ) -> LmdbStore:
        """Open (creating if needed) the store in directory ``path``.

        ``sync=False`` trades durability of the last commits for speed: benchmarks and tests
        only. The map starts at ``map_size`` and doubles on demand up to ``max_map_size``.
        """
        if max_map_size < map_size:
            raise ValueError(f"max_map_size {max_map_size} is below map_size {map_size}")
        try:
            os.makedirs(path, exist_ok=True)
            # writemap stays off: LMDB does not support nested transactions with it.
            env = lmdb.open(
                os.fspath(path),
                map_size=map_size,
                max_dbs=len(_DBS),
                sync=sync,
                metasync=sync,
                writemap=False,
                lock=True,
            )
            # A process killed while another kept the store open leaves reader slots that
            # pin old pages; clear them so the file does not grow behind dead readers.
            env.reader_check()
            with env.begin(write=True) as txn:
                dbs = {name: env.open_db(name.encode(), txn=txn) for name in _DBS}
        except (lmdb.Error, OSError) as exc:
            raise StorageError(f"cannot open the store at {os.fspath(path)!r}: {exc}") from exc
        return cls(env, dbs, max_map_size)

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check_open()
        with self._gate.reading():
            try:
                txn = self._env.begin(write=False)
            except lmdb.Error as exc:
                raise _failure(exc, "begin a read transaction") from exc
            try:
                yield _LmdbTxn([txn], self._dbs)
            finally:
                _abort(txn)

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        """Run ``work`` in one write transaction; re-run it from scratch on a larger map
        whenever LMDB reports the map full, so a full map never fails a send."""
        self._check_not_writing("transact", "use txn.savepoint()")
        with self._write_lock:
            self._writer = threading.get_ident()
            try:
                while True:
                    try:
                        return self._attempt(work)
                    except _MapFull:
                        self._grow()
            finally:
                self._writer = None

    def _attempt(self, work: Callable[[WriteTxn], T]) -> T:
        self._check_open()
        try:
            txn = self._env.begin(write=True)
        except lmdb.Error as exc:
            raise _failure(exc, "begin a write transaction") from exc
        writes = _LmdbWriteTxn(self._env, txn, self._dbs)
        try:
            result = work(writes)
            if not writes.map_full:
                _commit(txn, writes)
                return result
        except Exception:
            _abort(txn)
            # Once the map filled up the txn is broken, so whatever error followed is moot.
            if writes.map_full:
                raise _MapFull from None
            raise
        except BaseException:
            _abort(txn)
            raise
        _abort(txn)  # work swallowed a MapFullError: what it did is incomplete
        raise _MapFull

    def _grow(self) -> None:
        size = self._env.info()["map_size"]
        if size >= self._max_map_size:
            raise StorageError(
                f"the store at {self._path!r} is full: its map reached max_map_size "
                f"({self._max_map_size} bytes); open it with a larger max_map_size",
                path=self._path,
            )
        with self._gate.exclusive():
            try:
                self._env.set_mapsize(min(size * 2, self._max_map_size))
            except lmdb.Error as exc:
                raise _failure(exc, "grow the map") from exc

    def close(self) -> None:
        """Close the environment; later use of the store raises ``StorageError``."""
        self._check_not_writing("close", "close it after transact returns")
        with self._write_lock:  # let a running transaction finish first
            if not self._closed:
                self._closed = True
                self._env.close()

    def _check_not_writing(self, call: str, advice: str) -> None:
        # LMDB would block this thread on its own writer lock forever.
        if self._writer == threading.get_ident():
            raise StorageError(f"{call} called from inside transact; {advice}")

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"the store at {self._path!r} is closed", path=self._path)
