"""Where the TUI's events come from: a daemon's subscription (live), or a store (replay).

Both give ``(number, Event)`` in feed order, so the rows folded from them are the same rows
(``treemail.adapters.ui.transcript``); a replay opens the store read-only and never writes.
"""

from __future__ import annotations

from pathlib import Path

from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.store.factory import open_store
from treemail.core.records import Event
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_EVENT, EVENTS_SUBSCRIBE

__all__ = ["LiveFeed", "event_of", "stored_feed"]


def event_of(view: t.EventView) -> tuple[int, Event]:
    """An ``EventView`` off the wire as (feed number, Event)."""
    return view.number, Event(view.session_id, view.seq, view.kind, view.data)


class LiveFeed:
    """Every durable event of a daemon after ``after``, replayed and then live, each once."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client
        self.subscription: str | None = None

    async def start(self, after: int = 0, session_id: str | None = None) -> int:
        """Subscribe; the feed's end at that moment."""
        result = await self.client.request(
            EVENTS_SUBSCRIBE, t.EventsSubscribeParams(after=after, session_id=session_id))
        self.subscription = result.subscription_id
        return result.head

    async def next(self) -> tuple[int, Event]:
        """The next event, however long it takes; ``ConnectionError`` once the daemon has
        closed the connection (the client says so as soon as it is)."""
        while True:
            note = await self.client.next_notification(EVENTS_EVENT, timeout=None)
            if note.subscription_id == self.subscription:
                return event_of(note.event)

    def arrived(self, limit: int) -> list[tuple[int, Event]]:
        """Up to ``limit`` of the next events that have already arrived, without waiting:
        none when the feed is caught up."""
        notes = self.client.arrived_notifications(EVENTS_EVENT, limit)
        return [event_of(n.event) for n in notes if n.subscription_id == self.subscription]


def stored_feed(store: str | Path, after: int = 0) -> list[tuple[int, Event]]:
    """The feed of the store ``store`` names (a directory or a store URL), read-only (no lock
    taken, nothing written)."""
    opened = open_store(store, readonly=True)
    try:
        with opened.read() as tx:
            return list(tx.feed(after))
    finally:
        opened.close()
