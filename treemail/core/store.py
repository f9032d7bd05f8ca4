"""The Store port, and ``Indexed``, which builds it once over any backend's ``Tables``.

A store only stores. It keeps typed records and the indexes that make every send O(1): the
pending set of each recipient, handles per tree, sessions per tree, named counters, the
idempotency index and each session's event log. Every domain decision (what counts against a
cap, which transition is legal) is the engine's; the store's single duty is its own
integrity: a write transaction is applied whole or not at all.

``WriteTxn.savepoint()`` opens a nested transaction that can fail alone, so several sends can
share one durable commit (group commit) without one refusal undoing the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from treemail.core import keys
from treemail.core.errors import StorageError, StoreDamaged
from treemail.core.keys import CounterName, Table, Tally
from treemail.core.records import (
    Approval,
    Event,
    IdempotencyKey,
    Message,
    ProducerKey,
    Run,
    SendResult,
    Session,
)

__all__ = ["CallContext", "Indexed", "MailCounts", "ReadTxn", "Rows", "Store", "Tables",
           "WriteTxn"]

T = TypeVar("T")

# A send's reading of its recipient's tally: (last message seq, pending agent mail of the
# recipient, pending mail of the sender to it). A plain tuple: built and read without a call.
MailCounts = tuple[int, int, int]
# What a tool call's send reads first (``ReadTxn.tool_call``): the session and run it names,
# and the result stored under its replay key, None where there is none.
CallContext = tuple[Session | None, Run | None, SendResult | None]


class ReadTxn(Protocol):
    """A consistent snapshot of the store."""

    def session(self, session_id: str) -> Session | None: ...
    def sessions(self) -> Iterator[Session]:
        """Every session, in creation (ordinal) order."""
        ...
    def tree(self, root_session_id: str) -> Iterator[Session]:
        """The sessions of one tree, ghosts included, in creation order."""
        ...
    def handle_owner(self, root_session_id: str, handle: str) -> str | None:
        """The live session of that tree with that handle, if any."""
        ...
    def run(self, run_id: str) -> Run | None: ...
    def message(self, message_id: str) -> Message | None: ...
    def pending(self, recipient: str) -> Iterator[Message]:
        """The recipient's pending (non-final) messages in acceptance order."""
        ...
    def count(self, name: CounterName) -> int: ...
    def mail_counts(self, recipient: str, sender: str) -> MailCounts:
        """What a send reads of its recipient, in one read: the seq of the recipient's last
        message and the counts of ``inbox_counter(recipient)`` and ``pair_counter(sender,
        recipient)``."""
        ...
    def recall(self, key: IdempotencyKey | ProducerKey) -> SendResult | None: ...
    def tool_call(self, session_id: str, run_id: str, key: IdempotencyKey) -> CallContext:
        """``session(session_id)``, ``run(run_id)`` and ``recall(key)``, in one read: what
        every send reads first. The call id of ``key`` must be ``ids.storable`` (a send
        checks it first): it is its replay row's key part as it is, not checked again."""
        ...
    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        """The session's events with ``seq > after``, in order."""
        ...
    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        """Every session's events in the global order they were appended, numbered from 1:
        the stream observers follow live and audits replay. Inside a write transaction, a
        store that numbers appends at the commit (PostgreSQL) shows only the committed feed;
        ``feed_end`` counts the transaction's own appends on every store."""
        ...
    def feed_end(self) -> int:
        """The number of the feed's last event (0 when empty), without reading the feed."""
        ...
    def approval(self, approval_id: str) -> Approval | None: ...
    def approvals(self) -> Iterator[Approval]:
        """Every approval, answered or not, in id order."""
        ...


class WriteTxn(ReadTxn, Protocol):
    def put_session(self, session: Session) -> None: ...
    def put_run(self, run: Run) -> None: ...
    def put_message(self, message: Message) -> None: ...
    def add(self, name: CounterName, delta: int) -> int:
        """Add to a named counter and return its new value (a counter at 0 is not kept)."""
        ...
    def remember(self, key: IdempotencyKey | ProducerKey, result: SendResult) -> None: ...
    def accept_mail(self, message: Message, kind: str, data: Mapping[str, object],
                    key: IdempotencyKey, result: SendResult, counts: MailCounts) -> None:
        """A send's writes in one step, the same as ``put_message(message)``, ``add`` 1 to
        its recipient's seq, inbox and pair counters, ``append`` and ``remember``: for new
        agent mail (a new id; its seq ``counts[0] + 1``), where ``counts`` is what
        ``mail_counts(recipient, sender)`` read in this transaction, unchanged since."""
        ...
    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        """Append to the session's log and to the global feed, in one step."""
        ...
    def put_approval(self, approval: Approval) -> None: ...
    def savepoint(self) -> AbstractContextManager[WriteTxn]:
        """A nested transaction: undone alone if its block raises, kept otherwise."""
        ...


class Store(Protocol):
    def read(self) -> AbstractContextManager[ReadTxn]: ...
    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        """Run ``work`` in one write transaction and commit it; if ``work`` raises, nothing
        of it is kept. A store may run ``work`` again (say, after growing a full map), so
        ``work`` must touch nothing but the transaction."""
        ...
    def own(self, holder: Mapping[str, str]) -> None:
        """Hold the store as its one writer, described by ``holder`` (what a refused second
        writer is told: a daemon gives its role and socket). Recovery treats every run it did
        not start as dead, so a store has exactly one writer at a time: a store opened to
        write holds ownership from its open on (an flock for LMDB, a lock of the database
        server for PostgreSQL), and ``own`` only says who holds it. (Daemons may instead
        share a PostgreSQL store, each owning its trees through leases and recovering only
        those: ``treemail.adapters.store.leases``.) Raises ``StoreLocked``
        naming the holder when another process owns the store, ``StorageError`` on a store
        opened read-only."""
        ...
    def close(self) -> None: ...


class Tables(Protocol):
    """The primitives a backend implements; ``Indexed`` builds the whole port on them.

    Keys are the bytes of ``treemail.core.keys``; values are the records (or ids, counts and
    raw keys) that ``keys.VALUE_KINDS`` names for the table. ``scan`` returns every row whose
    key starts with ``prefix`` and is at least ``prefix + start``, in key order, read at once
    so that the caller may rewrite rows while walking them. ``size`` counts a table's rows;
    ``Indexed`` asks it only of the feed (``feed_end``), so a backend may count only that
    (LMDB does). ``append_feed`` puts an event's key at the feed's end, numbered
    ``size(FEED) + 1`` (the feed is dense from 1) by the backend: LMDB counts it without
    writing it out, PostgreSQL numbers it at the commit, and neither is asked for the size
    first; ``Indexed`` never puts or deletes a feed row otherwise. ``put_rows`` is ``put`` of
    each row in turn, in one call: a send writes five rows at once; ``get_rows`` is ``get``
    of each row, in one call (a send reads three rows of three tables first).
    """

    def get(self, table: Table, key: bytes) -> Any: ...
    def get_rows(self, rows: Sequence[tuple[Table, bytes]]) -> list[Any]: ...
    def put(self, table: Table, key: bytes, value: object) -> None: ...
    def put_rows(self, rows: Iterable[tuple[Table, bytes, object]]) -> None: ...
    def append_feed(self, event: bytes) -> None: ...
    def delete(self, table: Table, key: bytes) -> None: ...
    def scan(self, table: Table, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, Any]]: ...
    def size(self, table: Table) -> int: ...


Rows = tuple[tuple[Table, bytes, object], ...]
_NO_TALLY = Tally()
# The tables, read once here: under Python 3.11 a member read through its enum class
# (``Table.TALLY``) goes through ``EnumType.__getattr__``'s hook, about ten times the cost of
# reading a global, and every store call names one or more.
_SESSIONS = Table.SESSIONS
_RUNS = Table.RUNS
_MESSAGES = Table.MESSAGES
_REPLAY = Table.REPLAY
_EVENTS = Table.EVENTS
_APPROVALS = Table.APPROVALS
_TREE = Table.TREE
_HANDLES = Table.HANDLES
_PENDING = Table.PENDING
_COUNTERS = Table.COUNTERS
_TALLY = Table.TALLY
_FEED = Table.FEED
# The slots of a recipient's tally that a send counts in (``keys.counter_place`` of
# ``seq_counter``, ``inbox_counter`` and, with the sender after it, ``pair_counter``).
_SEQ_SLOT, _INBOX_SLOT, _PAIR_SLOT = (kind.value for kind in (
    keys.Counter.SEQ, keys.Counter.INBOX, keys.Counter.PAIR))


def _bump(counters: dict[str, int], slot: str, delta: int) -> int:
    """Add ``delta`` to a tally's slot and return the new count: a count that reaches 0 is
    not kept (the row of the general ``add`` and of a send's ``accept_mail`` alike)."""
    value = counters.pop(slot, 0) + delta
    if value:
        counters[slot] = value
    return value


def _lookup_key(build: Callable[[Any], bytes], part: Any) -> bytes | None:
    """The key ``build`` makes of ``part`` for a read, or None when no store could hold it."""
    try:
        return build(part)
    except (StorageError, UnicodeEncodeError):
        return None


class Indexed:
    """The Store port's reads and writes, and the upkeep of every index, over ``Tables``.

    Written once for every backend: a new one implements ``Tables`` (and ``savepoint``) and
    passes ``StoreContract``. Each write keeps its indexes in the same transaction, so an
    index never disagrees with its records after a commit.
    """

    # The replay key ``recall`` last looked up, and its row's key: a send recalls its key,
    # then ``accept_mail`` writes that very row, so the key is built once.
    _recalled: tuple[object, bytes | None] = (None, None)

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    def _follow(self, table: Table, key: bytes) -> Any:
        """A record an index points at; a dangling index entry is damage, not absence."""
        found = self._t.get(table, key)
        if found is None:
            raise StoreDamaged(f"an index points at {key!r}, missing from table {table.value!r}; "
                               "run `treemail verify` on the store", db=table.value, key=key)
        return found

    def _by_id(self, table: Table, record_id: str) -> Any:
        """A record by its id. An id no store could key (``keys.lookup``) names nothing:
        absent on every store, not a storage failure."""
        key = keys.lookup(record_id)
        return self._t.get(table, key) if key else None

    # -- reads ---------------------------------------------------------------------------

    def session(self, session_id: str) -> Session | None:
        # ``_by_id`` written out, as in ``run``: every send reads two sessions and a run.
        key = keys.lookup(session_id)
        found: Session | None = self._t.get(_SESSIONS, key) if key else None
        return found

    def sessions(self) -> Iterator[Session]:
        # Sorted rather than indexed: listing every session is not on any hot path.
        rows: list[Session] = [s for _, s in self._t.scan(_SESSIONS, b"")]
        return iter(sorted(rows, key=lambda s: s.ordinal))

    def tree(self, root_session_id: str) -> Iterator[Session]:
        prefix = _lookup_key(keys.tree_of, root_session_id)
        ids = self._t.scan(_TREE, prefix) if prefix else []
        return (self._follow(_SESSIONS, keys.identity(sid)) for _, sid in ids)

    def handle_owner(self, root_session_id: str, handle: str) -> str | None:
        found: str | None = self._t.get(_HANDLES, keys.handle(root_session_id, handle))
        return found

    def run(self, run_id: str) -> Run | None:
        key = keys.lookup(run_id)
        found: Run | None = self._t.get(_RUNS, key) if key else None
        return found

    def message(self, message_id: str) -> Message | None:
        found: Message | None = self._by_id(_MESSAGES, message_id)
        return found

    def pending(self, recipient: str) -> Iterator[Message]:
        # The ids are read now, so the caller may rewrite messages while iterating
        # (consuming them drops their index entries under the scan).
        prefix = _lookup_key(keys.pending_of, recipient)
        ids = self._t.scan(_PENDING, prefix) if prefix else []
        return (self._follow(_MESSAGES, keys.identity(mid)) for _, mid in ids)

    def count(self, name: CounterName) -> int:
        try:
            place = keys.counter_place(name)
        except (StorageError, UnicodeEncodeError):
            return 0  # a name no store could key was never counted
        if place is not None:
            tally: Tally = self._t.get(_TALLY, place.owner) or _NO_TALLY
            return tally.counters.get(place.slot, 0)
        key = _lookup_key(keys.counter, name)
        value: int = (self._t.get(_COUNTERS, key) if key else None) or 0
        return value

    def mail_counts(self, recipient: str, sender: str) -> MailCounts:
        # The three counters are slots of the recipient's tally (keys.TALLIED): one row.
        key = keys.lookup(recipient)
        tally: Tally = (self._t.get(_TALLY, key) if key else None) or _NO_TALLY
        counters = tally.counters
        return (counters.get(_SEQ_SLOT, 0), counters.get(_INBOX_SLOT, 0),
                counters.get(f"{_PAIR_SLOT}/{sender}", 0))

    def _put_tally(self, owner: bytes, tally: Tally) -> None:
        if tally.last_event or tally.counters:
            self._t.put(_TALLY, owner, tally)
        else:
            self._t.delete(_TALLY, owner)

    def recall(self, key: IdempotencyKey | ProducerKey) -> SendResult | None:
        try:  # ``_lookup_key`` written out: every send recalls its key
            raw: bytes | None = keys.replay(key)
        except (StorageError, UnicodeEncodeError):
            raw = None  # nor was a call whose ids no store could key
        self._recalled = (key, raw)
        found: SendResult | None = self._t.get(_REPLAY, raw) if raw else None
        return found

    def tool_call(self, session_id: str, run_id: str, key: IdempotencyKey) -> CallContext:
        try:  # as ``recall`` keys it, the call id checked by the caller (see the port)
            raw: bytes | None = keys.storable_call_replay(key)
        except (StorageError, UnicodeEncodeError):
            raw = None
        session_key, run_key = keys.lookup(session_id), keys.lookup(run_id)
        if not (raw and session_key and run_key):  # an id no store could key names nothing
            return self.session(session_id), self.run(run_id), self.recall(key)
        self._recalled = (key, raw)
        sender, run, result = self._t.get_rows(
            ((_SESSIONS, session_key), (_RUNS, run_key), (_REPLAY, raw)))
        return sender, run, result

    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        first = max(after + 1, 1)
        prefix = _lookup_key(keys.events_of, session_id)
        if first >= keys.SEQ_LIMIT or prefix is None:
            return iter(())
        rows = self._t.scan(_EVENTS, prefix, keys.seq_bytes(first))
        return iter([event for _, event in rows])

    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        first = max(after, 0) + 1
        if first >= keys.SEQ_LIMIT:
            return iter(())
        rows = self._t.scan(_FEED, b"", keys.feed(first))
        return ((keys.feed_number(number), self._follow(_EVENTS, key)) for number, key in rows)

    def feed_end(self) -> int:
        # The feed is dense from 1 (append-only; a savepoint gives its numbers back), so its
        # size is its last number: O(1) in every backend.
        return self._t.size(_FEED)

    def approval(self, approval_id: str) -> Approval | None:
        found: Approval | None = self._by_id(_APPROVALS, approval_id)
        return found

    def approvals(self) -> Iterator[Approval]:
        return iter([a for _, a in self._t.scan(_APPROVALS, b"")])

    # -- writes --------------------------------------------------------------------------

    def put_session(self, session: Session) -> None:
        old = self.session(session.session_id)
        if old is not None and old.handle is not None:
            self._t.delete(_HANDLES, keys.handle(old.root_session_id, old.handle))
        self._t.put(_SESSIONS, keys.identity(session.session_id), session)
        tree_key = keys.tree(session.root_session_id, session.ordinal)
        self._t.put(_TREE, tree_key, session.session_id)
        if session.handle is not None and session.live:
            handle_key = keys.handle(session.root_session_id, session.handle)
            self._t.put(_HANDLES, handle_key, session.session_id)

    def put_run(self, run: Run) -> None:
        self._t.put(_RUNS, keys.identity(run.run_id), run)

    def put_message(self, message: Message) -> None:
        record = keys.identity(message.message_id)
        # The pending entry never changes while the message is pending (a message never
        # becomes pending again), so it is written when the message is new and dropped when
        # it stops pending: not rewritten at every step. A step read the message already.
        old: Message | None = self._t.get(_MESSAGES, record)
        self._t.put(_MESSAGES, record, message)
        if message.pending and old is None:
            self._t.put(_PENDING, keys.pending(message.recipient, message.seq),
                        message.message_id)
        elif not message.pending and (old is None or old.pending):
            self._t.delete(_PENDING, keys.pending(message.recipient, message.seq))

    def add(self, name: CounterName, delta: int) -> int:
        place = keys.counter_place(name)
        if place is not None:
            return self._add_tallied(place, delta)
        value = self.count(name) + delta
        if value:
            self._t.put(_COUNTERS, keys.counter(name), value)
        else:
            self._t.delete(_COUNTERS, keys.counter(name))
        return value

    def _add_tallied(self, place: keys.CounterPlace, delta: int) -> int:
        tally: Tally = self._t.get(_TALLY, place.owner) or _NO_TALLY
        counters = dict(tally.counters)  # a new row: the stored one may be shared (fork)
        value = _bump(counters, place.slot, delta)
        self._put_tally(place.owner, Tally(tally.last_event, counters))
        return value

    def remember(self, key: IdempotencyKey | ProducerKey, result: SendResult) -> None:
        self._t.put(_REPLAY, keys.replay(key), result)

    def accept_mail(self, message: Message, kind: str, data: Mapping[str, object],
                    key: IdempotencyKey, result: SendResult, counts: MailCounts) -> None:
        # The general path reads the recipient's tally four times and writes it four times,
        # looks for an older version of the new message, and keys the counters by name; here
        # the tally is read once and written once, every key is built once, and the inbox
        # and pair counts are the ones the inbox guard read, not looked up again (two calls).
        recipient, seq = message.recipient, message.seq
        owner = keys.identity(recipient)
        tally: Tally = self._t.get(_TALLY, owner) or _NO_TALLY
        _, inbox, pair_count = counts
        # A new row (the stored one may be shared: fork), its slots in the order the
        # general path leaves them. Counts of pending mail, one more each: a count added to
        # never reaches 0 (``_bump``).
        counters = {**tally.counters, _SEQ_SLOT: seq, _INBOX_SLOT: inbox + 1,
                    f"{_PAIR_SLOT}/{message.sender}": pair_count + 1}
        recalled, replay_key = self._recalled
        if recalled is not key or not replay_key:
            replay_key = keys.call_replay(key)
        # A new id is minted (``IdSource``: a canonical UUID, which ``identity``'s checks
        # always pass), so its bytes are its key: through ``identity``'s cache every new id
        # would miss, and push out an id that reads hit.
        self._append(owner, recipient, Tally(tally.last_event + 1, counters), kind, data, (
            (_MESSAGES, message.message_id.encode(), message),
            (_PENDING, keys.pending(recipient, seq), message.message_id),
            (_REPLAY, replay_key, result)))

    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        owner = keys.identity(session_id)
        tally: Tally = self._t.get(_TALLY, owner) or _NO_TALLY
        return self._append(owner, session_id, Tally(tally.last_event + 1, tally.counters),
                            kind, data)

    def _append(self, owner: bytes, session_id: str, tally: Tally, kind: str,
                data: Mapping[str, object], rows: Rows = ()) -> Event:
        """Write ``tally``, whose last event seq numbers the new event, and the event in the
        log and at the feed's end, with ``rows`` (a send's other rows, in the same call).
        The tally makes the number an O(1) lookup, not a seek to the log's end; a send
        rewrites that row anyway, so the number costs no write."""
        seq = tally.last_event
        event = Event(session_id, seq, kind, dict(data))
        key = keys.event(session_id, seq)
        # seq > 0: the tally is never empty
        self._t.put_rows((*rows, (_TALLY, owner, tally), (_EVENTS, key, event)))
        self._t.append_feed(key)
        return event

    def put_approval(self, approval: Approval) -> None:
        self._t.put(_APPROVALS, keys.identity(approval.approval_id), approval)
