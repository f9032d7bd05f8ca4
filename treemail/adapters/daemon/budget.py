"""A connection's byte budget: what one peer makes the daemon hold, counted in bytes.

Counting frames bounds nothing: one answer may be a few bytes or tens of megabytes. So each
connection counts the bytes it holds the daemon to: the request frames in flight, each
answer from the moment it is encoded until the socket has taken it, and every queued
notification or server request. Work is started only while that count is under the limit:
the connection's reader waits before it starts the next request (the peer is no longer read,
so the kernel's socket buffers push back on it), a request waits before it runs its handler,
and a subscription waits before it sends (and so before it reads more of the feed).

An answer already encoded is counted at once and never waits for room: its bytes are spent,
and holding it back would free nothing. That is why the count may pass the limit, by at most
the answers that were being built when it was reached; see ``Limits.max_running``.
"""

from __future__ import annotations

import asyncio

__all__ = ["Budget", "Closed"]


class Closed(Exception):
    """The budget's connection closed while a task waited for room."""


class Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0  # the most held at once, for tests and the bench
        self._freed = asyncio.Event()
        self._closed = False

    def take(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    def give(self, size: int) -> None:
        self.held -= size
        freed, self._freed = self._freed, asyncio.Event()
        freed.set()

    async def room(self, size: int = 1) -> None:
        """Wait until ``size`` more bytes fit; anything fits when nothing is held, so one
        frame larger than the whole budget still goes, alone."""
        while not self._closed and self.held > 0 and self.held + size > self.limit:
            await self._freed.wait()
        if self._closed:
            raise Closed

    def close(self) -> None:
        """Wake every waiter: each raises ``Closed``."""
        self._closed = True
        self._freed.set()
