"""The durable feed on the wire: subscriptions, plugin events, and the tool gate.

A subscription is a cursor over the durable feed, not a buffer: its pump reads the next
bounded batch after its cursor, sends each event (waiting while the connection's queue is
full), and sleeps until the feed grows. Replay and live are the same loop over the same
numbers, so there is no seam at which an event could be skipped or sent twice, and a slow
client slows only its own pump; nothing is held for it but its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from treemail.adapters.daemon.connection import Connection, PeerGone
from treemail.adapters.runtime.llm import ToolCall
from treemail.adapters.runtime.plugins import PluginFailed, PluginRefusal
from treemail.adapters.runtime.runtime import Runtime
from treemail.core.errors import UnknownTarget
from treemail.core.records import Event, Session
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_notification

__all__ = ["BATCH", "FeedSignal", "Subscriptions", "WireGate", "event_view"]

BATCH = 256  # events read per store read: bounds a replay's memory, whatever its length
_POLL = 0.25  # a pump also looks every so often, in case a wake-up was missed


def event_view(number: int, event: Event) -> t.EventView:
    return t.EventView(number=number, session_id=event.session_id, seq=event.seq,
                       kind=event.kind, data=dict(event.data))


class FeedSignal:
    """An observer plugin of the runtime: it wakes the pumps when the feed grows."""

    name = "daemon-feed"

    def __init__(self) -> None:
        self._grew = asyncio.Event()

    def on_event(self, number: int, event: Event) -> None:
        grew, self._grew = self._grew, asyncio.Event()
        grew.set()

    def waiter(self) -> asyncio.Event:
        """Taken before a read: set if the feed grows after it, so no wake-up is lost."""
        return self._grew


class Subscriptions:
    def __init__(self, runtime: Runtime, signal: FeedSignal) -> None:
        self.rt = runtime
        self.signal = signal
        self._ids = itertools.count(1)
        self._tasks: dict[str, tuple[Connection, asyncio.Task[None]]] = {}

    async def head(self) -> int:
        end: int = await self.rt.writer.quiet(self.rt.engine.feed_end)
        return end

    async def subscribe(self, conn: Connection, after: int, session_id: str | None) -> str:
        if session_id is not None:
            await self.rt.writer.quiet(self.rt.engine.session, session_id)  # must exist
        sub_id = f"sub-{next(self._ids)}"

        def send(view: t.EventView) -> bytes:
            return encode_notification("events/event", t.EventNotification(
                subscription_id=sub_id, event=view))

        wanted = None if session_id is None else (lambda e: e.session_id == session_id)
        task = conn.spawn(self.pump(conn, after, send, wanted), f"{conn.name} {sub_id}")
        self._tasks[sub_id] = (conn, task)
        task.add_done_callback(lambda _: self._tasks.pop(sub_id, None))
        return sub_id

    async def unsubscribe(self, conn: Connection, sub_id: str) -> None:
        owner, task = self._tasks.get(sub_id, (None, None))
        if owner is not conn or task is None:
            raise UnknownTarget(f"no subscription {sub_id} on this connection",
                                subscription_id=sub_id)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def page(self, after: int, session_id: str | None,
                   limit: int) -> tuple[list[t.EventView], int, int]:
        """Up to ``limit`` events after ``after``: (the wanted ones, where the next page
        starts, the feed's end). Reads one bounded batch, filtered afterwards."""
        head = await self.head()
        batch = await self.rt.writer.quiet(_read, self.rt, after, min(max(limit, 1), BATCH))
        views = [event_view(n, e) for n, e in batch
                 if session_id is None or e.session_id == session_id]
        return views, batch[-1][0] if batch else max(after, head), head

    def plugin_events(self, conn: Connection, after: int) -> None:
        def send(view: t.EventView) -> bytes:
            return encode_notification("plugin/event", t.PluginEventNotification(event=view))

        conn.spawn(self.pump(conn, after, send, None), f"{conn.name} plugin events")

    async def pump(self, conn: Connection, after: int, send: Callable[[t.EventView], bytes],
                   wanted: Callable[[Event], bool] | None) -> None:
        cursor = after
        with contextlib.suppress(PeerGone):
            while True:
                grew = self.signal.waiter()
                batch = await self.rt.writer.quiet(_read, self.rt, cursor)
                for number, event in batch:
                    cursor = number
                    if wanted is None or wanted(event):
                        await conn.send(send(event_view(number, event)))
                if len(batch) < BATCH:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_POLL):
                            await grew.wait()


def _read(rt: Runtime, after: int, limit: int = BATCH) -> list[tuple[int, Event]]:
    with rt.engine.store.read() as tx:
        return list(itertools.islice(tx.feed(after), limit))


class WireGate:
    """A tool gate of the runtime that asks every connection that gates tool calls."""

    name = "daemon-gate"

    def __init__(self) -> None:
        self.connections: Callable[[], Iterable[Connection]] = lambda: ()

    async def tool_before_call(self, session: Session, call: ToolCall) -> None:
        params = t.ToolGateParams(session_id=session.session_id, agent=session.agent.name,
                                  tool_call_id=call.id, name=call.name,
                                  arguments=call.arguments)
        for conn in list(self.connections()):
            if not (conn.initialized and conn.capabilities.tool_gate):
                continue
            try:
                verdict: Any = await conn.ask("plugin/tool_before_call", params)
            except PeerGone as gone:
                raise PluginFailed(f"gate {conn.name} did not answer ({gone}); the call was "
                                   "refused, nothing ran", plugin=conn.name) from None
            allow = verdict.get("allow") if isinstance(verdict, dict) else None
            if allow is not True:
                reason = verdict.get("reason") if isinstance(verdict, dict) else None
                raise PluginRefusal(f"refused by plugin {conn.name}: {reason or 'no reason'}",
                                    plugin=conn.name)
