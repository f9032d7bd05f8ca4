"""The TUI's two sources: a running daemon (live, answers approvals) and a stored store with
no daemon (replay, read-only: opened without the writer's lock, and nothing is written).

Both open the same way: a snapshot of the sessions as they are now, the live feed after it,
and the history before it in pages, newest first, so a long history costs the first screen
nothing."""

from __future__ import annotations

import asyncio
import itertools
import socket as sockets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import msgspec

from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.store.factory import holds_store, open_store
from treemail.adapters.ui.tui.feed import LiveFeed, event_of
from treemail.core.errors import InvalidRequest
from treemail.core.records import ApprovalState, Event
from treemail.core.store import Store
from treemail.protocol import types as t
from treemail.protocol.methods import (
    APPROVAL_ANSWER,
    APPROVAL_LIST,
    EVENTS_READ,
    SESSION_GET,
    SESSION_LIST,
)

__all__ = ["BATCH", "PAGE", "LiveSource", "Snapshot", "Source", "StoreSource", "choose"]


PAGE = 256  # events a page of history holds: the most one ``events.read`` answers
# The most live events folded and shown in one go. A TUI that fell behind takes its backlog
# in batches: one screen update per batch instead of one per event, which is what kept it
# behind; bounded, so that keys are still read between batches of a long backlog.
BATCH = 256


@attrs.frozen
class Snapshot:
    """What the tree shows first: every session and every held call as they are at feed
    number ``head`` or later (``SessionView`` and ``ApprovalView`` as on the wire). The
    events after ``head`` arrive live; the history up to it, in pages, newest first."""

    head: int
    sessions: list[dict[str, Any]]
    approvals: list[dict[str, Any]]


class Source:
    """What the app reads from. ``read_only`` sources refuse ``answer``."""

    read_only = True
    where = ""

    async def open(self) -> None:
        """Connect (live) or open the store (replay)."""

    async def close(self) -> None:
        """Let go of the connection or the store."""

    async def snapshot(self) -> Snapshot:
        """The current state, and the live feed started after its ``head``."""
        raise NotImplementedError

    def batches(self) -> AsyncIterator[list[tuple[int, Event]]]:
        """The events after the snapshot's head, in order, in batches: each batch is every
        event that had arrived when it was taken (at most ``BATCH``, at least one). A replay
        has none; a live feed goes on."""
        raise NotImplementedError

    def history(self, head: int) -> AsyncIterator[list[tuple[int, Event]]]:
        """The feed up to ``head`` in pages, the newest page first; each page in order."""
        raise NotImplementedError

    async def approvals(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def resident(self, session_ids: list[str]) -> dict[str, bool]:
        """Whether each session's actor is in the daemon's memory now; a replay has no
        daemon, so nothing."""
        return {}

    async def answer(self, approval_id: str, approve: bool, scope: str,
                     reason: str | None = None) -> dict[str, Any]:
        raise InvalidRequest(f"a replay of {self.where} is read-only; answer approvals through a "
                       "running daemon (`treemail daemon`, then `treemail tui`)")


def _tops(head: int) -> Iterator[tuple[int, int]]:
    """(after, last) of each page of the feed up to ``head``, newest first."""
    last = head
    while last > 0:
        after = max(0, last - PAGE)
        yield after, last
        last = after


class LiveSource(Source):
    read_only = False

    def __init__(self, address: str | Path, token: str | None = None) -> None:
        self.address = str(address)  # a Unix socket's path, or tcp://HOST:PORT
        self.token = token
        self.where = self.address
        self.client: DaemonClient | None = None
        self.feed: LiveFeed | None = None

    async def open(self) -> None:
        self.client = await DaemonClient.connect(self.address, name="treemail tui",
                                                 token=self.token)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def _client(self) -> DaemonClient:
        assert self.client is not None, "open() first"
        return self.client

    async def snapshot(self) -> Snapshot:
        client = self._client()
        # The feed's end first, then the subscription after it, then the lists: they are as
        # new as the end or newer, and what the live feed repeats of them it repeats in order.
        head = (await client.request(EVENTS_READ, t.EventsReadParams(limit=1))).head
        self.feed = LiveFeed(client)
        await self.feed.start(head)
        sessions = await client.every(SESSION_LIST, t.SessionListParams())
        return Snapshot(head, msgspec.to_builtins(sessions), await self.approvals())

    async def batches(self) -> AsyncIterator[list[tuple[int, Event]]]:
        assert self.feed is not None, "snapshot() first"
        while True:
            first = await self.feed.next()
            yield [first, *self.feed.arrived(BATCH - 1)]

    async def history(self, head: int) -> AsyncIterator[list[tuple[int, Event]]]:
        client = self._client()
        for after, last in _tops(head):
            page: list[tuple[int, Event]] = []
            while after < last:  # a page may come short (its bytes are bounded too)
                got = await client.request(EVENTS_READ,
                                           t.EventsReadParams(after=after, limit=last - after))
                page += [item for item in map(event_of, got.events) if item[0] <= last]
                after = last if not got.events else got.next
            yield page

    async def resident(self, session_ids: list[str]) -> dict[str, bool]:
        client = self._client()
        found = {}
        for session_id in session_ids:
            view = await client.request(SESSION_GET, t.SessionGetParams(session_id=session_id))
            found[session_id] = view.resident
        return found

    async def approvals(self) -> list[dict[str, Any]]:
        listed = await self._client().request(APPROVAL_LIST, t.ApprovalListParams())
        approvals: list[dict[str, Any]] = msgspec.to_builtins(listed.approvals)
        return approvals

    async def answer(self, approval_id: str, approve: bool, scope: str,
                     reason: str | None = None) -> dict[str, Any]:
        answered: dict[str, Any] = msgspec.to_builtins(await self._client().request(
            APPROVAL_ANSWER, msgspec.convert(  # checks the scope, a string from the view
                {"approval_id": approval_id, "approve": approve, "scope": scope,
                 "reason": reason or None}, t.ApprovalAnswerParams)))
        return answered


class StoreSource(Source):
    def __init__(self, store_dir: Path | str) -> None:
        self.store_dir = store_dir  # a directory, or any store URL
        self.where = str(store_dir)
        self.store: Store | None = None

    async def open(self) -> None:
        # Read-only: no lock taken, nothing written.
        self.store = open_store(self.store_dir, readonly=True)

    async def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _store(self) -> Store:
        assert self.store is not None, "open() first"
        return self.store

    async def snapshot(self) -> Snapshot:
        from treemail.adapters.daemon.views import session_view

        with self._store().read() as tx:
            head = tx.feed_end()
            sessions = [msgspec.to_builtins(session_view(s)) for s in tx.sessions()]
        return Snapshot(head, sessions, await self.approvals())

    async def batches(self) -> AsyncIterator[list[tuple[int, Event]]]:
        return
        yield  # an async generator that ends at once: a replay has nothing live

    async def history(self, head: int) -> AsyncIterator[list[tuple[int, Event]]]:
        newest = max(0, head - PAGE)
        yield self._feed(newest, head)
        # The rest in one read, off the event loop (a read from a point scans to the
        # feed's end: page by page it would scan the newest events once per page).
        rest = await asyncio.to_thread(self._feed, 0, newest)
        for after, last in _tops(newest):
            yield rest[after:last]

    def _feed(self, after: int, last: int) -> list[tuple[int, Event]]:
        with self._store().read() as tx:
            return list(itertools.islice(tx.feed(after), last - after))

    async def approvals(self) -> list[dict[str, Any]]:
        from treemail.adapters.daemon.views import approval_view

        with self._store().read() as tx:
            held = [a for a in tx.approvals() if a.state is ApprovalState.PENDING]
        return [msgspec.to_builtins(approval_view(a)) for a in held]


def _accepts(path: Path) -> bool:
    with sockets.socket(sockets.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def choose(data_dir: Path, connect: str | None, token: str | None = None,
           store: str | None = None) -> Source:
    """``--connect ADDRESS`` (a socket path or tcp://HOST:PORT, with ``token``): that daemon.
    ``--store URL``: a read-only replay of that store.
    ``--data-dir DIR``: its daemon when one answers on ``DIR/daemon.sock``, else a read-only
    replay of ``DIR/store`` (or of DIR itself, when it is a store). Raises ``InvalidRequest``
    saying what to start when there is neither."""
    if connect is not None:
        return LiveSource(connect, token)
    if store is not None:
        return StoreSource(store)
    socket = data_dir / "daemon.sock"
    if socket.exists() and _accepts(socket):
        return LiveSource(socket)
    for kept in (data_dir / "store", data_dir):
        if holds_store(kept):
            return StoreSource(kept)
    raise InvalidRequest(f"no daemon answers at {socket} and there is no store at "
                         f"{data_dir / 'store'}; start one with `treemail daemon --data-dir "
                         f"{data_dir}`, or give --connect ADDRESS")
