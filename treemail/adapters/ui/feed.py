"""The client commands that read the event feed: ``tail`` (its end, live, after the last N
events of history if asked) and ``replay`` (one session's whole log), as transcript rows or,
with ``--json``, as the wire's event views, one JSON object a line."""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.adapters.ui.terminal import visible
from treemail.core.results import CallOutcome
from treemail.protocol import types as t
from treemail.protocol.methods import EVENTS_EVENT, EVENTS_READ, EVENTS_SUBSCRIBE, SESSION_GET

if TYPE_CHECKING:
    from treemail.adapters.ui.transcript import Row

__all__ = ["Names", "answer_line", "follow", "json_line", "outcome_text", "replay", "subscribe",
           "subscribed", "tail", "view_row"]

View = t.EventView


def json_line(value: Any) -> None:
    """One object as one line of JSON (non-ASCII text as it is, not escaped)."""
    print(json.dumps(value, ensure_ascii=False, separators=(",", ":")), flush=True)


def outcome_text(content: object) -> str:
    """A tool call's outcome (the JSON text its result carries) as a person reads it: a send
    says where its message went, an error says what went wrong and its code; anything else
    is shown as it is."""
    try:
        value = json.loads(str(content))
    except ValueError:
        return str(content)
    if not isinstance(value, dict):
        return str(content)
    if value.get("error"):
        return f"{value.get('message') or 'refused'} ({value['error']})"
    if "message_id" in value:
        state = value.get("recipient_state")
        where = f"; the recipient was {state}" if state else ""
        return f"sent as message {str(value['message_id'])[:8]} ({value.get('mode')}){where}"
    return ", ".join(f"{key} {item}" for key, item in value.items())


def answer_line(answered: dict[str, Any]) -> str:
    """An answered approval as one line: its state, the scope of an approval, the outcome."""
    scope = f" (scope {answered['scope']})" if answered.get("scope") else ""
    outcome = answered.get("outcome")  # an object, as the ApprovalAnswered event records it
    text = "no outcome yet" if outcome is None else outcome_text(CallOutcome(
        result=outcome.get("result"), error=outcome.get("error"),
        message=outcome.get("message")).text())
    return visible(f"{answered['state']}{scope}: {text}")


class Names:
    """How the rows name sessions: by handle, else by UUID. Filled from ``SessionCreated``
    events as they pass, so a new session costs no call; a session the feed has not shown
    (created before the rows began) is read once with ``session.get``, then remembered."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client
        self.known: dict[str, str] = {}

    async def row(self, view: View) -> Row:
        """The event view as its row, every session it names known first."""
        from treemail.core.events import EventKind  # loaded by the row's renderer anyway

        if view.kind == EventKind.SESSION_CREATED:
            handle = view.data.get("handle")
            sid = view.session_id
            self.known[sid] = handle if isinstance(handle, str) and handle else sid
        missing: set[str] = set()

        def name(sid: str | None) -> str:
            if sid and sid not in self.known:
                missing.add(sid)
            return self.known.get(sid or "", sid or "?")

        row = _named_row(view, name)
        if not missing:
            return row
        for sid in missing:
            await self._learn(sid)
        return view_row(view, self.known)

    async def _learn(self, session_id: str) -> None:
        try:
            session = await self.client.request(
                SESSION_GET, t.SessionGetParams(session_id=session_id))
        except RpcFailure:  # not a session (a malformed id in an event): shown as it is
            self.known[session_id] = session_id
            return
        self.known[session_id] = session.handle or session_id


def view_row(view: View, names: Mapping[str, str]) -> Row:
    """An event view of the wire as its transcript row, sessions named by ``names``."""
    return _named_row(view, lambda sid: names.get(sid or "", sid or "?"))


def _named_row(view: View, name: Callable[[str | None], str]) -> Row:
    from treemail.adapters.ui.transcript import event_row  # the core's events, when shown
    from treemail.core.records import Event

    return event_row(Event(view.session_id, view.seq, view.kind, view.data), name)


async def _views(client: DaemonClient, session_id: str | None, after: int,
                 upto: int) -> AsyncIterator[View]:
    """The feed's events numbered ``after`` < number <= ``upto`` (one session's, or all),
    page by page."""
    while after < upto:
        page = await client.request(EVENTS_READ,
                                    t.EventsReadParams(after=after, session_id=session_id))
        for view in page.events:
            if view.number <= upto:
                yield view
        if page.next <= after:  # nothing more to read (the feed ends before upto)
            return
        after = page.next


async def _feed(client: DaemonClient, session_id: str | None,
                last: int) -> AsyncIterator[tuple[View | None, int]]:
    """The last ``last`` events up to the feed's end, then ``(None, head)`` once subscribed
    after that end, then each new event, for as long as the daemon serves
    (``ConnectionError`` once it stops)."""
    head = (await client.request(EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
    if last:
        # One session's last N may lie anywhere in the feed: read its events, keep N.
        start = 0 if session_id is not None else max(0, head - last)
        history: deque[View] = deque(maxlen=last)
        history.extend([view async for view in _views(client, session_id, start, head)])
        for view in history:
            yield view, view.number
    await subscribe(client, session_id, head)
    yield None, head
    async for view in subscribed(client):
        yield view, view.number


async def subscribe(client: DaemonClient, session_id: str | None, after: int) -> None:
    """Subscribe to the feed's events after number ``after`` (one session's, or all): they
    come replayed, then live, with no gap and no duplicate (see ``subscribed``)."""
    await client.request(EVENTS_SUBSCRIBE,
                         t.EventsSubscribeParams(after=after, session_id=session_id))


async def subscribed(client: DaemonClient) -> AsyncIterator[View]:
    """The events of the connection's subscription, for as long as the daemon serves
    (``ConnectionError`` once it stops)."""
    while True:  # an idle feed is followed for as long as it takes
        note = await client.next_notification(EVENTS_EVENT, timeout=None)
        yield note.event


async def follow(client: DaemonClient, session_id: str | None,
                 show: Callable[[Row | None, int], None], last: int = 0) -> None:
    """Follow the feed from its end (after its last ``last`` events): ``show(None, head)``
    once subscribed, each event's row with its number. Sessions are named by ``Names``: a
    new one costs no call."""
    names = Names(client)
    async for view, number in _feed(client, session_id, last):
        show(None if view is None else await names.row(view), number)


async def tail(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import console, print_row

    out, shown = console(), 0

    def show(row: Row | None, number: int) -> None:
        nonlocal shown
        shown = number
        if row is not None:
            print_row(row, out)
            return
        # On stderr, so the rows on stdout stay the feed alone; it says tail now follows.
        print(f"treemail tail: following the feed after #{number}; Ctrl-C stops",
              file=sys.stderr, flush=True)

    try:
        if not args.json:
            await follow(client, args.session, show, args.lines)
            return 0
        async for view, number in _feed(client, args.session, args.lines):
            if view is None:
                show(None, number)
            else:
                shown = number
                json_line(msgspec.to_builtins(view))
    except BrokenPipeError:  # stdout's reader went away (`| head`): main's to handle
        raise
    except ConnectionError:  # the daemon stopped, or died: say so, never wait on it
        print(f"treemail tail: the daemon closed the connection after #{shown}: it stopped "
              "or died; start it again with `treemail daemon`, then tail again",
              file=sys.stderr, flush=True)
        return 1
    return 0


async def replay(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.ui.console import console, print_row

    out = console()
    names = Names(client)
    head = (await client.request(EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
    async for view in _views(client, args.session, 0, head):
        if args.json:
            json_line(msgspec.to_builtins(view))
        else:
            print_row(await names.row(view), out)
    return 0
