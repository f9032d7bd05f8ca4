"""A live source with no daemon behind it: the TUI's client reads a socket whose other end
the test writes, so a burst of events reaches the client as a daemon's would (frames on a
socket, read into the client's queue) and the test decides when and how many. Also the
burst: a tree's traffic made on an engine, as (feed number, Event)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

from tests.unit.conftest import World
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.ui.tui.feed import LiveFeed
from treemail.adapters.ui.tui.sources import LiveSource, Snapshot
from treemail.core.memory_store import MemoryStore
from treemail.core.records import Event
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_notice
from treemail.protocol.methods import EVENTS_EVENT

__all__ = ["Piped", "traffic"]

SUBSCRIPTION = "piped"


class Piped(LiveSource):
    """The live source over a socket pair: an empty tree at feed number 0, no history, no
    held calls, and whatever ``send`` writes to the other end as its live feed."""

    def __init__(self) -> None:
        super().__init__("piped")
        self.peer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        self.client = DaemonClient(reader, writer, timeout=None)
        _, self.peer = await asyncio.open_unix_connection(sock=theirs)

    async def close(self) -> None:
        if self.peer is not None:
            self.peer.close()
        await super().close()

    async def snapshot(self) -> Snapshot:
        self.feed = LiveFeed(self._client())
        self.feed.subscription = SUBSCRIPTION
        return Snapshot(0, [], [])

    async def history(self, head: int) -> AsyncIterator[list[tuple[int, Event]]]:
        return
        yield  # nothing before the snapshot

    async def approvals(self) -> list[dict[str, object]]:
        return []

    async def resident(self, session_ids: list[str]) -> dict[str, bool]:
        return {}

    async def send(self, feed: list[tuple[int, Event]]) -> None:
        """``feed`` as the daemon sends it: one ``events/event`` frame each, in one write."""
        assert self.peer is not None, "open() first"
        self.peer.write(b"".join(encode_notice(EVENTS_EVENT, t.EventNotification(
            SUBSCRIPTION, t.EventView(number, e.session_id, e.seq, e.kind, dict(e.data))))
            for number, e in feed))
        await self.peer.drain()


def traffic(rounds: int) -> list[tuple[int, Event]]:
    """A lead and three workers: each round, every worker sends the lead a note and the lead
    reads them; then the workers read what the lead sent back. The feed, from its start."""
    world = World(MemoryStore())
    lead = world.root("lead", {"*": "allow"})
    workers = [world.child(lead, name, {"*": "allow"}) for name in ("alpha", "beta", "gamma")]
    for n in range(rounds):
        for worker in workers:
            world.send(worker, lead, f"note {n} from {worker.handle}")
            world.send(lead, worker, f"reply {n} to {worker.handle}")
        world.consume_all(lead)
        for worker in workers:
            world.consume_all(worker)
    return world.engine.feed()
