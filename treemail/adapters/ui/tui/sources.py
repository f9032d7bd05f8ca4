"""The TUI's two sources: a running daemon (live, answers approvals) and a stored store with
no daemon (replay, read-only: opened without the writer's lock, and nothing is written)."""

from __future__ import annotations

import socket as sockets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.store.factory import holds_store
from treemail.adapters.ui.tui.feed import LiveFeed, stored_feed
from treemail.core.errors import InvalidRequest
from treemail.core.records import Event
from treemail.protocol import types as t
from treemail.protocol.methods import APPROVAL_ANSWER, APPROVAL_LIST

__all__ = ["LiveSource", "Source", "StoreSource", "choose"]


class Source:
    """What the app reads from. ``read_only`` sources refuse ``answer``."""

    read_only = True
    where = ""

    async def open(self) -> None:
        """Connect (live) or check the store (replay)."""

    async def close(self) -> None:
        """Let go of the connection, if any."""

    async def subscribe(self) -> int:
        """Start the feed; its end at that moment (the backlog ends there)."""
        raise NotImplementedError

    def events(self) -> AsyncIterator[tuple[int, Event]]:
        """The feed from the start, in order: a replay ends, a live feed goes on."""
        raise NotImplementedError

    async def approvals(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def answer(self, approval_id: str, approve: bool, scope: str) -> dict[str, Any]:
        raise InvalidRequest(f"a replay of {self.where} is read-only; answer approvals through a "
                       "running daemon (`treemail daemon`, then `treemail tui`)")


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

    async def subscribe(self) -> int:
        self.feed = LiveFeed(self._client())
        return await self.feed.start(0)

    async def events(self) -> AsyncIterator[tuple[int, Event]]:
        assert self.feed is not None, "subscribe() first"
        while True:
            yield await self.feed.next()

    async def approvals(self) -> list[dict[str, Any]]:
        listed = await self._client().request(APPROVAL_LIST, t.ApprovalListParams())
        approvals: list[dict[str, Any]] = msgspec.to_builtins(listed.approvals)
        return approvals

    async def answer(self, approval_id: str, approve: bool, scope: str) -> dict[str, Any]:
        answered: dict[str, Any] = msgspec.to_builtins(await self._client().request(
            APPROVAL_ANSWER, msgspec.convert(  # checks the scope, a string from the view
                {"approval_id": approval_id, "approve": approve, "scope": scope},
                t.ApprovalAnswerParams)))
        return answered


class StoreSource(Source):
    def __init__(self, store_dir: Path | str) -> None:
        self.store_dir = store_dir  # a directory, or any store URL
        self.where = str(store_dir)
        self.feed: list[tuple[int, Event]] = []

    async def subscribe(self) -> int:
        self.feed = stored_feed(self.store_dir)
        return self.feed[-1][0] if self.feed else 0

    async def events(self) -> AsyncIterator[tuple[int, Event]]:
        for item in self.feed:
            yield item

    async def approvals(self) -> list[dict[str, Any]]:
        from treemail.adapters.daemon.views import approval_view
        from treemail.adapters.store.factory import open_store
        from treemail.core.engine import Engine
        from treemail.core.ids import CountingIds

        store = open_store(self.store_dir, readonly=True)
        try:
            held = Engine(store, CountingIds()).approvals(pending=True)
            return [msgspec.to_builtins(approval_view(a)) for a in held]
        finally:
            store.close()


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
