"""The Store port, and ``MemoryStore``, its pure in-memory implementation.

A store only stores. It keeps typed records and the indexes that make every send O(1): the
pending set of each recipient, handles per tree, sessions per tree, named counters, the
idempotency index and each session's event log. Every domain decision (what counts against a
cap, which transition is legal) is the engine's; the store's single duty is its own
integrity: a write transaction is applied whole or not at all.

``WriteTxn.savepoint()`` opens a nested transaction that can fail alone, so several sends can
share one durable commit (group commit) without one refusal undoing the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

from treemail.core.records import (
    Approval,
    Event,
    IdempotencyKey,
    Message,
    Run,
    SendResult,
    Session,
)

__all__ = ["MemoryStore", "ReadTxn", "Store", "WriteTxn"]

T = TypeVar("T")


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
    def count(self, name: str) -> int: ...
    def recall(self, key: IdempotencyKey) -> SendResult | None: ...
    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        """The session's events with ``seq > after``, in order."""
        ...
    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        """Every session's events in the global order they were appended, numbered from 1:
        the stream observers follow live and audits replay."""
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
    def add(self, name: str, delta: int) -> int:
        """Add to a named counter and return its new value (a counter at 0 is not kept)."""
        ...
    def remember(self, key: IdempotencyKey, result: SendResult) -> None: ...
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
    def close(self) -> None: ...


_MISSING: Any = object()


class _Tables:
    """Dict tables with an undo log, so a transaction rolls back by replaying it backwards."""

    def __init__(self) -> None:
        self.data: dict[str, dict[Any, Any]] = {
            name: {}
            for name in ("sessions", "tree", "handles", "runs", "messages", "pending",
                         "counters", "replay", "events", "last_seq", "feed",
                         "approvals")
        }
        self.undo: list[Callable[[], None]] = []

    def get(self, table: str, key: Any) -> Any:
        return self.data[table].get(key)

    def put(self, table: str, key: Any, value: Any) -> None:
        self._record(table, key)
        self.data[table][key] = value

    def delete(self, table: str, key: Any) -> None:
        if key in self.data[table]:
            self._record(table, key)
            del self.data[table][key]

    def scan(self, table: str, prefix: tuple[Any, ...]) -> list[Any]:
        rows = self.data[table]
        return [rows[k] for k in sorted(k for k in rows if k[: len(prefix)] == prefix)]

    def _record(self, table: str, key: Any) -> None:
        rows = self.data[table]
        old = rows.get(key, _MISSING)

        def restore() -> None:
            if old is _MISSING:
                rows.pop(key, None)
            else:
                rows[key] = old

        self.undo.append(restore)

    def rollback_to(self, mark: int) -> None:
        while len(self.undo) > mark:
            self.undo.pop()()


class _MemoryTxn:
    def __init__(self, tables: _Tables) -> None:
        self._t = tables

    # -- reads ---------------------------------------------------------------------------

    def session(self, session_id: str) -> Session | None:
        found: Session | None = self._t.get("sessions", session_id)
        return found

    def sessions(self) -> Iterator[Session]:
        rows = self._t.data["sessions"].values()
        return iter(sorted(rows, key=lambda s: s.ordinal))

    def tree(self, root_session_id: str) -> Iterator[Session]:
        ids = self._t.scan("tree", (root_session_id,))
        return iter(self._t.get("sessions", sid) for sid in ids)

    def handle_owner(self, root_session_id: str, handle: str) -> str | None:
        found: str | None = self._t.get("handles", (root_session_id, handle))
        return found

    def run(self, run_id: str) -> Run | None:
        found: Run | None = self._t.get("runs", run_id)
        return found

    def message(self, message_id: str) -> Message | None:
        found: Message | None = self._t.get("messages", message_id)
        return found

    def pending(self, recipient: str) -> Iterator[Message]:
        ids = self._t.scan("pending", (recipient,))
        return iter(self._t.get("messages", mid) for mid in ids)

    def count(self, name: str) -> int:
        value: int = self._t.get("counters", name) or 0
        return value

    def recall(self, key: IdempotencyKey) -> SendResult | None:
        found: SendResult | None = self._t.get("replay", key)
        return found

    def events(self, session_id: str, after: int = 0) -> Iterator[Event]:
        log: list[Event] = self._t.scan("events", (session_id,))
        return iter(log[max(after, 0) :])

    def feed(self, after: int = 0) -> Iterator[tuple[int, Event]]:
        rows = self._t.data["feed"]
        for number in range(max(after, 0) + 1, len(rows) + 1):
            yield number, self._t.get("events", rows[number])

    def feed_end(self) -> int:
        return len(self._t.data["feed"])

    def approval(self, approval_id: str) -> Approval | None:
        found: Approval | None = self._t.get("approvals", approval_id)
        return found

    def approvals(self) -> Iterator[Approval]:
        rows = self._t.data["approvals"]
        return iter([rows[key] for key in sorted(rows)])

    # -- writes --------------------------------------------------------------------------

    def put_session(self, session: Session) -> None:
        old = self.session(session.session_id)
        if old is not None and old.handle is not None:
            self._t.delete("handles", (old.root_session_id, old.handle))
        self._t.put("sessions", session.session_id, session)
        self._t.put("tree", (session.root_session_id, session.ordinal), session.session_id)
        if session.handle is not None and session.live:
            self._t.put("handles", (session.root_session_id, session.handle), session.session_id)

    def put_run(self, run: Run) -> None:
        self._t.put("runs", run.run_id, run)

    def put_message(self, message: Message) -> None:
        self._t.put("messages", message.message_id, message)
        key = (message.recipient, message.seq)
        if message.pending:
            self._t.put("pending", key, message.message_id)
        else:
            self._t.delete("pending", key)

    def add(self, name: str, delta: int) -> int:
        value = self.count(name) + delta
        if value:
            self._t.put("counters", name, value)
        else:
            self._t.delete("counters", name)
        return value

    def remember(self, key: IdempotencyKey, result: SendResult) -> None:
        self._t.put("replay", key, result)

    def append(self, session_id: str, kind: str, data: Mapping[str, object]) -> Event:
        seq: int = (self._t.get("last_seq", session_id) or 0) + 1
        event = Event(session_id, seq, kind, dict(data))
        self._t.put("last_seq", session_id, seq)
        self._t.put("events", (session_id, seq), event)
        self._t.put("feed", self.feed_end() + 1, (session_id, seq))
        return event

    def put_approval(self, approval: Approval) -> None:
        self._t.put("approvals", approval.approval_id, approval)

    @contextmanager
    def savepoint(self) -> Iterator[WriteTxn]:
        mark = len(self._t.undo)
        try:
            yield self
        except BaseException:
            self._t.rollback_to(mark)
            raise


class MemoryStore:
    """A Store in plain dicts: the reference for the store contract tests, and fast for models."""

    def __init__(self) -> None:
        self._tables = _Tables()
        self._closed = False

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        yield _MemoryTxn(self._tables)

    def transact(self, work: Callable[[WriteTxn], T]) -> T:
        txn = _MemoryTxn(self._tables)
        with txn.savepoint():
            result = work(txn)
        self._tables.undo.clear()
        return result

    def close(self) -> None:
        self._closed = True
