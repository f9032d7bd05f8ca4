"""What the TUI shows: the sessions of the tree and each one's transcript, so a live view and
a replay of the same store show the same thing.

The sessions start from a snapshot of their current state (``start``: what ``session.list``
and ``approval.list`` say now), so the tree never shows an old state as current while the
history loads; from then on the feed keeps them current, as the session lifecycle does: run
events set the state, ``SessionReverted`` makes a ghost, an ``ApprovalRequested`` of one of
its calls makes it wait on the user until the ``ApprovalAnswered``. The history before the
snapshot arrives in pages, newest first (``older``), and only fills the transcripts: it says
nothing about a session's state that the snapshot does not say better. A session's pending
mail is its mail rows not yet consumed or discarded, known once the whole history is folded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from treemail.adapters.ui.transcript import Row, Transcript
from treemail.core import events
from treemail.core.lifecycle import MessageState, SessionState
from treemail.core.records import Event

__all__ = ["WAITING", "Board", "Changed", "SessionLine"]

WAITING = "waiting on you"  # a session one of whose calls is held for the user's answer
_FINAL = frozenset({MessageState.CONSUMED.value, MessageState.DISCARDED.value})
_APPROVAL_KINDS = (events.ApprovalRequested, events.ApprovalAnswered)
_RESIDENT_KINDS = (events.RunQueued, events.RunStarted)  # a run's actor is in memory
_RUN_STATES: Mapping[type, SessionState] = {
    events.RunQueued: SessionState.QUEUED, events.RunStarted: SessionState.RUNNING,
    events.RunFinished: SessionState.FINISHED, events.RunInterrupted: SessionState.IDLE,
}


@attrs.define
class SessionLine:
    """One session as the sessions pane shows it; ``live`` is false for a ghost, ``waiting``
    holds the approvals its calls wait on, ``resident`` whether its actor is in the daemon's
    memory (never, in a replay)."""

    session_id: str
    parent: str | None
    handle: str
    agent: str
    state: SessionState = SessionState.IDLE
    pending: int | None = None  # None until the whole history is folded
    live: bool = True
    waiting: set[str] = attrs.field(factory=set)
    resident: bool = False

    def shown_state(self) -> str:
        return WAITING if self.waiting else self.state.value

    def label(self) -> str:
        # The state first: the tree's pane is narrow, and a long handle must not push the
        # state out of it. The dot only where an actor lives; a ghost says so in words.
        mark = "●" if self.resident else " "
        pending = "…" if self.pending is None else str(self.pending)
        ghost = "" if self.live else "  (ghost)"
        return f"{mark} {self.shown_state()}  ✉ {pending}  {self.handle}  {self.agent}{ghost}"


@attrs.frozen
class Changed:
    """What a batch of live events changed, for the panes to show once: the sessions they
    touched and each row they touched at its newest, both in the order first touched, and
    whether one of them asked or answered an approval."""

    sessions: list[str]
    rows: list[Row]
    approvals: bool


class Board:
    """Sessions and transcripts; ``live`` folds live events (``add`` one), ``older`` a page
    of history."""

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.sessions: dict[str, SessionLine] = {}
        self.last = 0  # the feed number of the newest event folded
        self.folded = 0  # how many events are folded, live and history together
        self.complete = False  # the whole history is folded
        self.sources: dict[str, list[Event]] = {}  # each row's events, oldest first
        self._open: dict[str, set[str]] = {}  # each session's mail rows not yet final
        self.spawns: dict[str, int] = {}  # per session: the live events that lit its dot

    def start(self, lines: Iterable[SessionLine], head: int) -> None:
        """The sessions as they are now, at feed number ``head``; the history before it is
        still to come."""
        for line in lines:
            self.sessions[line.session_id] = line
            self.transcript.names[line.session_id] = line.handle
        self.last = head
        self.complete = head == 0

    def live(self, batch: Iterable[tuple[int, Event]]) -> Changed:
        """Fold live events, each newer than any folded so far, in order; what they changed.
        A run queued or started lights its session's dot: its actor is in the daemon."""
        sessions: dict[str, None] = {}
        rows: dict[str, Row] = {}
        approvals = False
        for number, event in batch:
            payload = events.read(event)
            row = self.add(number, event, payload)
            line = self.sessions.get(event.session_id)
            if line is not None and isinstance(payload, _RESIDENT_KINDS):
                line.resident = True
                self.spawns[event.session_id] = self.spawns.get(event.session_id, 0) + 1
            approvals = approvals or isinstance(payload, _APPROVAL_KINDS)
            sessions[event.session_id] = None
            if row is not None:
                rows[row.key] = row  # a row touched again keeps its place, at its newest
        return Changed(list(sessions), list(rows.values()), approvals)

    def add(self, number: int, event: Event,
            payload: events.Payload | events.UnknownEvent | None = None) -> Row | None:
        """Fold one event newer than any folded so far (``payload``: its payload, when read
        already)."""
        self.last = max(self.last, number)
        self.folded += 1
        payload = events.read(event) if payload is None else payload
        line = self._session(event, payload)
        if line is not None:
            self._steer(line, payload)
        row = self.transcript.add(event, payload)
        if row is not None:
            self.sources.setdefault(row.key, []).append(event)
            self._count(row)
        return row

    def older(self, page: list[tuple[int, Event]]) -> list[Row]:
        """Fold a page of history, older than every event folded so far; the rows it added
        or changed."""
        self.folded += len(page)
        grouped: dict[str, list[Event]] = {}
        payloads = [events.read(event) for _, event in page]
        for (_, event), payload in zip(page, payloads, strict=True):
            if isinstance(payload, events.SessionCreated):
                self._session(event, payload)  # one the snapshot missed: its first sight
            # each event to its row, as the in-order fold would
            grouped.setdefault(_key(event, payload), []).append(event)
        rows = self.transcript.prepend([event for _, event in page], payloads)
        for row in rows:
            self.sources[row.key] = grouped.get(row.key, []) + self.sources.get(row.key, [])
        for row in rows:
            self._count(row)
        return rows

    def finish(self) -> None:
        """The whole history is folded: every pending count is known."""
        self.complete = True
        for line in self.sessions.values():
            line.pending = len(self._open.get(line.session_id, ()))

    def extend(self, feed: Iterable[tuple[int, Event]]) -> None:
        for number, event in feed:
            self.add(number, event)
        self.finish()

    def waiting(self) -> int:
        return sum(len(line.waiting) for line in self.sessions.values())

    def roots(self) -> list[SessionLine]:
        return [s for s in self.sessions.values() if s.parent not in self.sessions]

    def children(self, session_id: str) -> list[SessionLine]:
        return [s for s in self.sessions.values() if s.parent == session_id]

    def _session(self, event: Event, payload: events.Payload | events.UnknownEvent,
                 ) -> SessionLine | None:
        if isinstance(payload, events.SessionCreated) and event.session_id not in self.sessions:
            self.sessions[event.session_id] = SessionLine(
                event.session_id, payload.parent_session_id,
                payload.handle or event.session_id, payload.agent,
                pending=0 if self.complete else None)
        return self.sessions.get(event.session_id)

    def _steer(self, line: SessionLine, payload: events.Payload | events.UnknownEvent) -> None:
        """What a live event says of its session's state."""
        if isinstance(payload, events.SessionReverted):
            line.live = False
        state = _RUN_STATES.get(type(payload))
        if state is not None:
            line.state = state
        if isinstance(payload, events.ApprovalRequested):
            line.waiting.add(payload.approval_id)
        elif isinstance(payload, events.ApprovalAnswered):
            line.waiting.discard(payload.approval_id)

    def _count(self, row: Row) -> None:
        if row.state is None:
            return
        still = self._open.setdefault(row.session_id, set())
        if row.state in _FINAL:
            still.discard(row.key)
        else:
            still.add(row.key)
        line = self.sessions.get(row.session_id)
        if line is not None and self.complete:
            line.pending = len(still)


def _key(event: Event, payload: events.Payload | events.UnknownEvent) -> str:
    """The row ``event`` folds into (as ``transcript.event_row`` keys it)."""
    if isinstance(payload, events.MESSAGE_PAYLOADS):
        return f"mail:{payload.message_id}"
    return f"event:{event.session_id}:{event.seq}"
