"""``MemoryStore``: the Store port in plain dicts, with an undo log for its transactions.

The reference backend of the store contract tests, and the model checker's store: it forks
per explored state, so its transactions and copies are kept cheap rather than general.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from operator import attrgetter
from typing import Any, TypeVar

from treemail.core import keys
from treemail.core.errors import StorageError, StoreClosed
from treemail.core.keys import CounterName, Table, Tally
from treemail.core.records import Event, Message, Run, Session
from treemail.core.store import Indexed, ReadTxn, WriteTxn

__all__ = ["MemoryStore"]

T = TypeVar("T")

_MISSING: Any = object()


class _Closed(dict[Table, dict[bytes, Any]]):
    """The tables of a closed MemoryStore: any use raises, as a closed LMDB store does, at
    no cost to the open store's hot path."""

    def __missing__(self, table: Table) -> dict[bytes, Any]:
        raise StoreClosed("the memory store is closed; open a new one")


class _DictTables:
    """``Tables`` in dicts, with an undo log so a transaction rolls back by replaying it
    backwards, and each table's keys kept sorted between changes of its key set.

    A scan bisects the sorted keys and reads only the rows it returns, instead of sorting
    the table: the model checker scans a recipient's pending mail several times per step.
    The sorted list is dropped when a key comes or goes (a rewrite of a row keeps it) and
    rebuilt by the next scan; it is never changed in place, so a fork shares it.
    """

    def __init__(self, data: dict[Table, dict[bytes, Any]] | None = None,
                 order: dict[Table, list[bytes] | None] | None = None) -> None:
        self.data = data if data is not None else {table: {} for table in Table}
        # Each table's keys in order, or None until a scan needs them again.
        self.order: dict[Table, list[bytes] | None] = (
            order if order is not None else dict.fromkeys(Table))
        # (table, rows, key, old value or _MISSING), replayed backwards to roll back.
        self.undo: list[tuple[Table, dict[bytes, Any], bytes, Any]] = []

    def get(self, table: Table, key: bytes) -> Any:
        return self.data[table].get(key)

    def get_rows(self, rows: Sequence[tuple[Table, bytes]]) -> list[Any]:
        data = self.data
        return [data[table].get(key) for table, key in rows]

    def put(self, table: Table, key: bytes, value: object) -> None:
        rows = self.data[table]
        old = rows.get(key, _MISSING)
        self.undo.append((table, rows, key, old))
        rows[key] = value
        if old is _MISSING:
            self.order[table] = None

    def append_feed(self, event: bytes) -> None:
        self.put(_FEED, keys.feed(len(self.data[_FEED]) + 1), event)

    def put_rows(self, rows: Iterable[tuple[Table, bytes, object]]) -> None:
        for table, key, value in rows:
            self.put(table, key, value)

    def delete(self, table: Table, key: bytes) -> None:
        rows = self.data[table]
        if key in rows:
            self.undo.append((table, rows, key, rows.pop(key)))
            self.order[table] = None

    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]:
        rows = self.data[table]
        order = self.order[table]
        if order is None:
            order = self.order[table] = sorted(rows)
        if not prefix and not start:
            return [(key, rows[key]) for key in order]
        found = []
        at = bisect_left(order, prefix + start)
        end = len(order)
        while at < end:
            key = order[at]
            if not key.startswith(prefix):
                break
            found.append((key, rows[key]))
            at += 1
        return found

    def size(self, table: Table) -> int:
        return len(self.data[table])

    def rollback_to(self, mark: int) -> None:
        undo = self.undo
        order = self.order
        while len(undo) > mark:
            table, rows, key, old = undo.pop()
            if old is _MISSING:
                rows.pop(key, None)
                order[table] = None
            else:
                if key not in rows:
                    order[table] = None
                rows[key] = old


_NO_TALLY = Tally()
_SEP = keys.SEP
_ORDINAL = attrgetter("ordinal")
_SESSIONS, _RUNS, _MESSAGES, _EVENTS = Table.SESSIONS, Table.RUNS, Table.MESSAGES, Table.EVENTS
_TREE, _HANDLES, _PENDING, _TALLY, _FEED, _COUNTERS = (
    Table.TREE, Table.HANDLES, Table.PENDING, Table.TALLY, Table.FEED, Table.COUNTERS)


class _MemoryTxn(Indexed):
    """``Indexed`` over dicts, with its busiest reads and writes written against the dicts.

    The model checker runs the engine against this store millions of times, and a call through
    ``Tables`` cost more than the dict work it did. Each override writes exactly the rows the
    general method writes (the store contract and the differential tests run both).
    """

    def __init__(self, tables: _DictTables) -> None:
        # ``Indexed.__init__`` written out: a transaction is opened per read and per step.
        self._t = tables
        self._dicts = tables

    def _put(self, table: Table, key: bytes, value: object) -> None:
        tables = self._dicts
        rows = tables.data[table]
        old = rows.get(key, _MISSING)
        tables.undo.append((table, rows, key, old))
        rows[key] = value
        if old is _MISSING:
            tables.order[table] = None

    # -- reads ---------------------------------------------------------------------------

    # A record by id, under the key ``keys.identity`` gives it, written out in each of the
    # three (each engine step reads several records; the checker takes millions of steps).
    # An id no store could hold (a lone surrogate, or empty) names nothing. An id with NUL
    # or over ``MAX_KEY`` bytes is never stored either (``keys.identity`` refused it on the
    # way in), so its plain bytes find nothing, as ``Indexed`` answers, without checking
    # them on every read.

    def session(self, session_id: str) -> Session | None:
        try:
            key = session_id.encode()
        except UnicodeEncodeError:
            return None
        found: Session | None = self._dicts.data[_SESSIONS].get(key) if key else None
        return found

    def run(self, run_id: str) -> Run | None:
        try:
            key = run_id.encode()
        except UnicodeEncodeError:
            return None
        found: Run | None = self._dicts.data[_RUNS].get(key) if key else None
        return found

    def message(self, message_id: str) -> Message | None:
        try:
            key = message_id.encode()
        except UnicodeEncodeError:
            return None
        found: Message | None = self._dicts.data[_MESSAGES].get(key) if key else None
        return found

    def count(self, name: CounterName) -> int:
        # ``Indexed.count`` against the dicts: the model checker's invariants count every
        # session's mail at every step.
        try:
            place = keys.counter_place(name)
        except (StorageError, UnicodeEncodeError):
            return 0  # a name no store could key was never counted
        data = self._dicts.data
        if place is not None:
            tally: Tally | None = data[_TALLY].get(place.owner)
            return 0 if tally is None else tally.counters.get(place.slot, 0)
        key = keys.lookup(name)  # ``keys.counter``, or b"" where it refuses the name
        value: int = (data[_COUNTERS].get(key) if key else None) or 0
        return value

    def pending(self, recipient: str) -> Iterator[Message]:
        try:
            prefix = keys.pending_of(recipient)
        except (StorageError, UnicodeEncodeError):
            return iter(())
        # ``scan`` and ``_follow`` written out, the messages read at once rather than by a
        # generator (a call per message): the model checker reads a recipient's pending mail
        # several times per step. Read now, as ``Indexed`` reads the ids now, so the caller
        # may rewrite messages while iterating; each id was keyed by ``keys.identity`` when
        # its message was stored.
        tables = self._dicts
        data = tables.data
        rows, messages = data[_PENDING], data[_MESSAGES]
        order = tables.order[_PENDING]
        if order is None:
            order = tables.order[_PENDING] = sorted(rows)
        found = []
        at, end = bisect_left(order, prefix), len(order)
        while at < end and order[at].startswith(prefix):
            key = rows[order[at]].encode()
            message: Message | None = messages.get(key)
            found.append(message if message is not None
                         else self._follow(_MESSAGES, key))  # raises: the index is damaged
            at += 1
        return iter(found)

    def sessions(self) -> Iterator[Session]:
        # ``Indexed.sessions`` (key order, then by ordinal), from the kept key order.
        tables = self._dicts
        rows = tables.data[_SESSIONS]
        order = tables.order[_SESSIONS]
        if order is None:
            order = tables.order[_SESSIONS] = sorted(rows)
        return iter(sorted([rows[key] for key in order], key=_ORDINAL))

    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        # The feed is dense from 1 (see ``feed_end``): its rows after ``after`` are looked
        # up by number, not found by a scan of the whole feed.
        first = max(after, 0) + 1
        if first >= keys.SEQ_LIMIT:
            return iter(())
        feed = self._dicts.data[_FEED]
        return self._feed(feed, first, len(feed) + 1)  # its end read now, as a scan would

    def _feed(self, feed: dict[bytes, bytes], first: int, end: int
              ) -> Iterator[tuple[int, Event]]:
        # ``keys.feed`` and ``_follow`` written out: the checker reads every step's events.
        tables = self._dicts
        for number in range(first, end):
            key = feed[number.to_bytes(8, "big")]  # under SEQ_LIMIT: the feed is dense
            found: Event | None = tables.data[_EVENTS].get(key)
            yield (number, found if found is not None else self._follow(_EVENTS, key))

    # -- writes --------------------------------------------------------------------------

    def put_session(self, session: Session) -> None:
        # The rows ``Indexed.put_session`` leaves, without rewriting a tree or handle entry
        # that already holds this session (most steps change only the state and run).
        data = self._dicts.data
        session_id = session.session_id
        key = keys.identity(session_id)
        old: Session | None = data[_SESSIONS].get(key)
        root = session.root_session_id
        handle_key = (keys.handle(root, session.handle)
                      if session.handle is not None and session.live else None)
        # The old handle's key is the new one exactly when both name the same root and handle
        # (keys are joined at a NUL no part holds): then it is not built again.
        if old is not None and old.handle is not None and (
                handle_key is None or old.handle != session.handle
                or old.root_session_id != root):
            old_handle = keys.handle(old.root_session_id, old.handle)
            if old_handle != handle_key:
                self._dicts.delete(_HANDLES, old_handle)
        rows = data[_SESSIONS]  # ``_put`` written out: every step of a session stores it
        tables = self._dicts
        tables.undo.append((_SESSIONS, rows, key, _MISSING if old is None else old))
        rows[key] = session
        if old is None:
            tables.order[_SESSIONS] = None
        try:  # ``keys.tree`` written out
            tree_key = keys.tree_of(root) + session.ordinal.to_bytes(8, "big")
        except OverflowError:
            keys.tree(root, session.ordinal)  # raises its refusal
            raise
        if data[_TREE].get(tree_key) != session_id:
            self._put(_TREE, tree_key, session_id)
        if handle_key is not None and data[_HANDLES].get(handle_key) != session_id:
            self._put(_HANDLES, handle_key, session_id)

    def put_run(self, run: Run) -> None:
        self._put(_RUNS, keys.identity(run.run_id), run)

    def put_message(self, message: Message) -> None:
        record = keys.identity(message.message_id)
        tables = self._dicts
        rows = tables.data[_MESSAGES]
        old: Message | None = rows.get(record)
        # ``_put`` written out (a message is never stored as None, so ``old`` is its old
        # value): every step of a message stores it.
        tables.undo.append((_MESSAGES, rows, record, _MISSING if old is None else old))
        rows[record] = message
        if old is None:
            tables.order[_MESSAGES] = None
        if message.state.pending:  # the state's, kept on the member: ``Message.pending``'s
            if old is None:
                self._put(_PENDING, keys.pending(message.recipient, message.seq),
                          message.message_id)
        elif old is None or old.state.pending:
            self._dicts.delete(_PENDING, keys.pending(message.recipient, message.seq))

    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        owner = keys.identity(session_id)
        tables = self._dicts
        rows = tables.data
        tallies, logs, feed = rows[_TALLY], rows[_EVENTS], rows[_FEED]
        found: Tally | None = tallies.get(owner)
        tally = found or _NO_TALLY
        seq = tally.last_event + 1
        try:  # ``keys.event`` and ``keys.feed`` written out: every stored step appends
            key = owner + _SEP + seq.to_bytes(8, "big")
            number = (len(feed) + 1).to_bytes(8, "big")
        except OverflowError:
            keys.event(session_id, seq), keys.feed(len(feed) + 1)  # raise their refusal
            raise
        event = Event(session_id, seq, kind, dict(data))
        old_event = logs.get(key, _MISSING)
        # ``_put`` of the tally, the event and the feed's new last row, written out.
        tables.undo += ((_TALLY, tallies, owner, found if found is not None else _MISSING),
                        (_EVENTS, logs, key, old_event), (_FEED, feed, number, _MISSING))
        tallies[owner] = Tally(seq, tally.counters)
        logs[key] = event
        feed[number] = key
        order = tables.order
        if found is None:
            order[_TALLY] = None
        if old_event is _MISSING:
            order[_EVENTS] = None
        order[_FEED] = None
        return event

    def savepoint(self) -> _Savepoint:
        return _Savepoint(self)

    # Entered and left by hand rather than through ``contextmanager``: the model checker opens
    # one transaction and a read or two per step, and a generator-based manager cost more
    # than the store's own dict work for most of them.
    def __enter__(self) -> _MemoryTxn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Savepoint:
    """A nested transaction of a memory store: its writes are undone if its block raises."""

    __slots__ = ("_mark", "_txn")

    def __init__(self, txn: _MemoryTxn) -> None:
        self._txn = txn
        self._mark = len(txn._dicts.undo)

    def __enter__(self) -> WriteTxn:
        return self._txn

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            self._txn._dicts.rollback_to(self._mark)


class MemoryStore:
    """A Store in plain dicts: the reference for the store contract tests, and fast for models."""

    def __init__(self) -> None:
        self._tables = _DictTables()
        # Every transaction and read of this store goes through this one: a ``_MemoryTxn``
        # holds nothing of its own but its tables (and ``recall``'s last key, which names
        # the same row in any transaction), and the checker opens two or three per step.
        self._txn = _MemoryTxn(self._tables)

    # ``_check_open`` written out in ``read`` and ``transact``: the checker opens one of each
    # per step.
    def read(self) -> AbstractContextManager[ReadTxn]:
        if isinstance(self._tables.data, _Closed):
            raise StoreClosed("the memory store is closed; open a new one")
        return self._txn

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        tables = self._tables
        if isinstance(tables.data, _Closed):
            raise StoreClosed("the memory store is closed; open a new one")
        mark = len(tables.undo)
        try:
            result = work(self._txn)
        except BaseException:
            tables.rollback_to(mark)
            raise
        tables.undo.clear()
        return result

    def fork(self) -> MemoryStore:
        """An independent copy of this store, cheap enough to take per explored state.

        Table by table, not a deep copy: every stored value is a frozen record, an id, a count
        or event data the engine never mutates after appending, so the copies may share them.
        """
        self._check_open()
        twin = MemoryStore.__new__(MemoryStore)  # not __init__: its empty tables go unused
        tables = self._tables
        twin._tables = _DictTables({table: dict(rows) for table, rows in tables.data.items()},
                                   dict(tables.order))
        twin._txn = _MemoryTxn(twin._tables)
        return twin

    def rows(self, table: Table) -> dict[bytes, Any]:
        """A copy of one table's rows by key: for tests and audits that look under the port."""
        self._check_open()
        return dict(self._tables.data[table])

    def own(self, holder: Mapping[str, str]) -> None:
        """A memory store lives in one process, whose it is: there is no one to refuse."""
        self._check_open()

    def close(self) -> None:
        """Close the store; later use of it, or of a transaction it gave, raises."""
        self._tables.data = _Closed()

    def _check_open(self) -> None:
        if isinstance(self._tables.data, _Closed):
            raise StoreClosed("the memory store is closed; open a new one")
