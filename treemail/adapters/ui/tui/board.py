"""What the TUI shows, folded from the feed alone: the sessions of the tree and each one's
transcript, so a live view and a replay of the same store show the same thing.

A session's state follows its run events (queued, started, finished, interrupted) as the
session lifecycle does; its pending mail is the mail rows not yet consumed or discarded;
it is ``live`` from its ``SessionCreated`` until a ``SessionReverted`` makes it a ghost (the
stored session's ``live`` flag follows the same two events). Nothing is polled: every change
of a row arrives as an event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from treemail.adapters.ui.transcript import Row, Transcript
from treemail.core import events
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Event

__all__ = ["Board", "SessionLine"]

_FINAL = frozenset({MessageState.CONSUMED.value, MessageState.DISCARDED.value})
_RUN_STATES: Mapping[type, SessionState] = {
    events.RunQueued: SessionState.QUEUED, events.RunStarted: SessionState.RUNNING,
    events.RunFinished: SessionState.FINISHED, events.RunInterrupted: SessionState.IDLE,
}


@attrs.define
class SessionLine:
    """One session as the sessions pane shows it; ``live`` is false for a ghost."""

    session_id: str
    parent: str | None
    handle: str
    agent: str
    state: SessionState = SessionState.IDLE
    pending: int = 0
    live: bool = True

    def label(self) -> str:
        mark = "●" if self.live else "○"
        return f"{mark} {self.handle}  {self.agent}  {self.state.value}  ✉ {self.pending}"


class Board:
    """Sessions and transcripts, from the feed; ``add`` returns what changed."""

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.sessions: dict[str, SessionLine] = {}
        self.last = 0  # the feed number of the last event folded

    def add(self, number: int, event: Event) -> Row | None:
        self.last = number
        payload = events.read(event)
        if isinstance(payload, events.SessionCreated):
            self.sessions[event.session_id] = SessionLine(
                event.session_id, payload.parent_session_id,
                payload.handle or event.session_id, payload.agent)
        line = self.sessions.get(event.session_id)
        if line is not None and isinstance(payload, events.SessionReverted):
            line.live = False
        state = _RUN_STATES.get(type(payload))
        if line is not None and state is not None:
            line.state = state
        was = self._pending(event, payload)
        row = self.transcript.add(event, payload)
        if line is not None:
            line.pending += self._pending(event, payload) - was
        return row

    def _pending(self, event: Event, payload: events.Payload | events.UnknownEvent) -> int:
        """1 if the message ``payload`` speaks of has a row that is not final, else 0."""
        if not isinstance(payload, events.MESSAGE_PAYLOADS):
            return 0
        row = self.transcript.row(f"mail:{payload.message_id}")
        return int(row is not None and row.state not in _FINAL)

    def extend(self, feed: Iterable[tuple[int, Event]]) -> None:
        for number, event in feed:
            self.add(number, event)

    def roots(self) -> list[SessionLine]:
        return [s for s in self.sessions.values() if s.parent not in self.sessions]

    def children(self, session_id: str) -> list[SessionLine]:
        return [s for s in self.sessions.values() if s.parent == session_id]
