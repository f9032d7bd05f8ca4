"""The durable feed on the wire: subscriptions, plugin events, and the tool gate.

A subscription is a cursor over the durable feed, not a buffer: its pump reads the next
bounded batch after its cursor, sends each event (waiting while the connection is over its
byte budget), and sleeps until the feed grows. Replay and live are the same loop over the
same numbers, so there is no seam at which an event could be skipped or sent twice, and a
slow client slows only its own pump; nothing is held for it but its cursor.

An idle subscription costs nothing: no pump polls. The runtime's feed follower hands every
committed event to ``FeedSignal``, which wakes the pumps that want it: every unfiltered
pump, and the pumps of that event's session only. It keeps the last ``RING`` events, so a
pump that is live takes them from memory; only one that lags reads the store.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from collections.abc import Callable, Iterable

import msgspec

from treemail.adapters.daemon.connection import Connection, PeerGone
from treemail.adapters.daemon.views import event_view
from treemail.adapters.runtime.llm import ToolCall
from treemail.adapters.runtime.plugins import PluginFailed, PluginRefusal
from treemail.adapters.runtime.runtime import Runtime
from treemail.core.errors import UnknownTarget
from treemail.core.records import Event, Session
from treemail.protocol import types as t
from treemail.protocol.jsonrpc import encode_notice
from treemail.protocol.methods import EVENTS_EVENT, PLUGIN_EVENT, PLUGIN_TOOL_BEFORE_CALL
from treemail.protocol.rpc_errors import TooManySubscriptions

__all__ = ["BATCH", "RING", "FeedSignal", "Subscriptions", "WireGate"]

BATCH = 256  # events read per store read: bounds a replay's memory, whatever its length
RING = 64  # recent events kept for live pumps: few, as an event may carry a 256 KiB body


class Wake:
    """A pump's wake-up: set by the first wanted event after it was taken (``first``)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.first = 0

    def set(self, number: int) -> None:
        self.first = number
        self.event.set()


class FeedSignal:
    """An observer plugin of the runtime: it wakes the pumps when the feed grows, and keeps
    the newest events for them. The follower hands it every event once, in order."""

    name = "daemon-feed"

    def __init__(self) -> None:
        self._grew = Wake()
        self._sessions: dict[str, Wake] = {}
        self._ring: list[tuple[int, Event]] = []

    def on_event(self, number: int, event: Event) -> None:
        self._ring.append((number, event))
        if len(self._ring) > 2 * RING:  # trimmed in steps, not at every event
            del self._ring[:-RING]
        grew, self._grew = self._grew, Wake()
        grew.set(number)
        wake = self._sessions.pop(event.session_id, None)
        if wake is not None:
            wake.set(number)

    def waiter(self, session_id: str | None = None) -> Wake:
        """Taken before a read: set by the first event (of ``session_id``, if given) handed
        over after it, so no wake-up is lost."""
        if session_id is None:
            return self._grew
        return self._sessions.setdefault(session_id, Wake())

    def since(self, cursor: int) -> list[tuple[int, Event]] | None:
        """The kept events after ``cursor`` (at most ``BATCH``); None when ``cursor`` is
        older than the oldest kept, so that only the store has what follows it."""
        if not self._ring or cursor < self._ring[0][0] - 1:
            return None
        start = bisect.bisect_right(self._ring, cursor, key=lambda kept: kept[0])
        return self._ring[start:start + BATCH]


class Subscriptions:
    def __init__(self, runtime: Runtime, signal: FeedSignal) -> None:
        self.rt = runtime
        self.signal = signal
        self._ids = itertools.count(1)
        self._tasks: dict[str, tuple[Connection, asyncio.Task[None]]] = {}
        self.reads = 0  # the pumps' reads of the store, for tests and the bench
        self.parked = 0  # the pumps asleep until a wanted event comes

    async def head(self) -> int:
        end: int = await self.rt.writer.quiet(self.rt.engine.feed_end)
        return end

    async def subscribe(self, conn: Connection, after: int, session_id: str | None) -> str:
        if session_id is not None:
            await self.rt.writer.quiet(self.rt.engine.session, session_id)  # must exist
        cap = conn.limits.max_subscriptions
        if conn.subscriptions >= cap:  # checked and counted with no await between
            raise TooManySubscriptions(
                f"this connection already has {cap} subscriptions, the most it may hold; "
                "unsubscribe one (events.unsubscribe) or subscribe to every session at once "
                "(no session_id), then retry", limit=cap)
        sub_id = f"sub-{next(self._ids)}"

        def send(view: t.EventView) -> bytes:
            return encode_notice(EVENTS_EVENT, t.EventNotification(
                subscription_id=sub_id, event=view))

        task = conn.spawn(self.pump(conn, after, send, session_id), f"{conn.name} {sub_id}")
        self._tasks[sub_id] = (conn, task)
        conn.subscriptions += 1

        def ended(_: object) -> None:
            self._tasks.pop(sub_id, None)
            conn.subscriptions -= 1

        task.add_done_callback(ended)
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
        batch = await self.rt.writer.quiet(_read, self.rt, after, min(limit, BATCH))
        views = [event_view(n, e) for n, e in batch
                 if session_id is None or e.session_id == session_id]
        return views, batch[-1][0] if batch else max(after, head), head

    def plugin_events(self, conn: Connection, after: int) -> None:
        def send(view: t.EventView) -> bytes:
            return encode_notice(PLUGIN_EVENT, t.PluginEventNotification(event=view))

        conn.spawn(self.pump(conn, after, send, None), f"{conn.name} plugin events")

    async def pump(self, conn: Connection, after: int, send: Callable[[t.EventView], bytes],
                   session_id: str | None) -> None:
        cursor = after
        with contextlib.suppress(PeerGone):
            while True:
                wake = self.signal.waiter(session_id)
                batch = self.signal.since(cursor)
                if batch is None:
                    self.reads += 1
                    batch = await self.rt.writer.quiet(_read, self.rt, cursor)
                for number, event in batch:
                    cursor = number
                    if session_id is None or event.session_id == session_id:
                        await conn.send(send(event_view(number, event)))
                if len(batch) < BATCH:  # caught up: sleep until a wanted event comes
                    self.parked += 1
                    try:
                        await wake.event.wait()
                    finally:
                        self.parked -= 1
                    # No event of its session lies before the one that woke it, so the
                    # cursor may skip to it, past what other sessions appended meanwhile.
                    cursor = max(cursor, wake.first - 1)


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
                verdict = await conn.ask(PLUGIN_TOOL_BEFORE_CALL, params)
            except PeerGone as gone:
                raise PluginFailed(f"gate {conn.name} did not answer ({gone}); the call was "
                                   "refused, nothing ran", plugin=conn.name) from None
            except msgspec.ValidationError as exc:
                raise PluginRefusal(f"refused by plugin {conn.name}: its answer is not a "
                                    f"verdict ({exc})", plugin=conn.name) from None
            if not verdict.allow:
                raise PluginRefusal(f"refused by plugin {conn.name}: "
                                    f"{verdict.reason or 'no reason'}", plugin=conn.name)
