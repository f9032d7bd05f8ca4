"""The list methods' pages: ``session.list``, ``run.list`` and ``message.list``.

Each page is read in one writer job, from one read transaction, and is bounded: at most
``limit`` items (``PAGE_LIMIT`` at most), and for messages about ``PAGE_BODY_BYTES`` of
bodies. The cursor is a position in an order the store already keeps, so a page never
repeats or skips an item that existed when the first page was read, however many are added
meanwhile (a new item lands after every cursor given out):

* sessions: their creation ordinal (global, dense, never reused);
* runs and messages: the ``seq`` of the entry of the session's log that recorded them
  (``RunQueued``, ``ProducerMessageAccepted``).

``next`` is the cursor of the last item of the page, or None when nothing follows it: the
reader looks one item past the page to know, so the last page says it is the last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from treemail.core.engine import Engine
from treemail.core.errors import StoreDamaged
from treemail.core.events import EventKind
from treemail.core.records import Message, Run, Session
from treemail.core.runs import need_session
from treemail.core.store import ReadTxn
from treemail.protocol.types import PAGE_BODY_BYTES

__all__ = ["Page", "messages", "runs", "sessions", "take"]

T = TypeVar("T")
Page = tuple[list[T], int | None]


def take(items: Iterable[tuple[int, T]], limit: int,
         cost: Callable[[T], int] | None = None, budget: int = 0) -> Page[T]:
    """The first ``limit`` items of ``(cursor, item)`` pairs, fewer when ``cost`` is given
    and the next item would take the page past ``budget`` (the first item always fits);
    with the cursor of the page's last item when more follow, else None."""
    page: list[T] = []
    spent, last = 0, 0
    for cursor, item in items:
        price = cost(item) if cost is not None else 0
        if len(page) >= limit or (page and cost is not None and spent + price > budget):
            return page, last
        page.append(item)
        spent, last = spent + price, cursor
    return page, None


def sessions(engine: Engine, root: str | None, after: int, limit: int) -> Page[Session]:
    with engine.store.read() as tx:
        if root is not None:
            need_session(tx, root)  # an unknown tree is an error, not an empty page
        found = tx.tree(root) if root is not None else tx.sessions()
        return take(((s.ordinal, s) for s in found if s.ordinal > after), limit)


def runs(engine: Engine, session_id: str, after: int, limit: int) -> Page[Run]:
    with engine.store.read() as tx:
        need_session(tx, session_id)
        return take(((seq, _need(tx.run(i), "run", i))
                     for seq, i in _logged(tx, session_id, after, EventKind.RUN_QUEUED, "run_id")),
                    limit)


def messages(engine: Engine, session_id: str, after: int, limit: int,
             pending_only: bool) -> Page[Message]:
    with engine.store.read() as tx:
        need_session(tx, session_id)
        mail = ((seq, _need(tx.message(i), "message", i)) for seq, i in _logged(
            tx, session_id, after, EventKind.PRODUCER_MESSAGE_ACCEPTED, "message_id"))
        return take(((seq, m) for seq, m in mail if m.pending or not pending_only), limit,
                    cost=_body_bytes, budget=PAGE_BODY_BYTES)


def _logged(tx: ReadTxn, session_id: str, after: int, kind: EventKind,
            key: str) -> Iterator[tuple[int, str]]:
    """(seq, the id it names) of each entry of ``kind`` in the session's log after ``after``."""
    for event in tx.events(session_id, after):
        if event.kind == kind:
            yield event.seq, str(event.data[key])


def _need(found: T | None, what: str, record_id: str) -> T:
    if found is None:  # the log names it, so the store lost it
        raise StoreDamaged(f"the log names {what} {record_id}, which the store does not hold; "
                           "run `treemail verify` on the store", record=record_id)
    return found


def _body_bytes(message: Message) -> int:
    return len(message.body.encode("utf-8", "surrogatepass"))
