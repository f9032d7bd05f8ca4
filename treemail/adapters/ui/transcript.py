"""The transcript's row model: typed events in, rows out, the same for live and replay.

One pure function (``event_row``) turns a stored event into a ``Row``; the CLI's ``log``,
``tail`` and ``replay`` print one row per event, and the TUI folds the same rows with
``Transcript``, where the rows of one message collapse into a single mail row whose lifecycle
state is updated in place. Neither reads the clock, the store or the connection, so a log
followed live and the same log replayed from the store give identical rows by construction;
``tests/acceptance/test_live_equals_replay.py`` checks that through a real daemon.

Mail rows are ``ProducerMessage*`` events whatever the mode, so steer and queue deliveries
read alike, differing only in the mode they carry.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping

import attrs

from treemail.adapters.daemon.lookup import short_approval_id
from treemail.adapters.ui.terminal import visible
from treemail.core import events, owners
from treemail.core.lifecycle import MessageState
from treemail.core.records import Event, Session

__all__ = [
    "Namer", "Row", "Tone", "Transcript", "brief_result", "event_row", "render_event",
    "render_log",
]

Namer = Callable[[str | None], str]


class Tone(enum.StrEnum):
    """What a row is about; the CLI and the TUI colour rows by it."""

    MAIL = "mail"
    SESSION = "session"
    RUN = "run"
    REQUEST = "request"
    MODEL = "model"
    TOOL = "tool"
    APPROVAL = "approval"
    UNKNOWN = "unknown"


@attrs.frozen
class Row:
    """One transcript row. ``key`` is its identity in a folded transcript: every event of one
    message shares ``mail:<message_id>``; any other event is its own row. ``state`` is a mail
    row's lifecycle state (accepted ... consumed, discarded), else None. ``who`` and ``text``
    hold outside text (bodies, model output, reasons), so a row keeps them only with their
    control characters escaped (``terminal.visible``): no row a terminal or the TUI shows
    can send it a command."""

    key: str
    session_id: str
    seq: int
    who: str = attrs.field(converter=visible)
    tone: Tone
    text: str = attrs.field(converter=visible)
    state: str | None = None

    def line(self) -> str:
        """The row as one plain line: who, the event's place in its session's log, what."""
        return f"  {self.who:<22} #{self.seq:<3} {self.text}"


def _short(text: object, width: int = 60) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _origin(mail: events.MessagePayload, name: Namer) -> str:
    owner = mail.owner.OWNER.value
    return f"{owner} mail from {name(mail.sender)}" if mail.sender else f"{owner} mail"


def _accepted_text(verb: str, mail: events.ProducerMessageAccepted, name: Namer) -> str:
    hop = f", hop={mail.agent_hop}" if isinstance(mail.owner, owners.AgentOwner) else ""
    return (f"{verb:<9} {_origin(mail, name)} (mode={mail.mode.value}{hop}): "
            f"\"{_short(mail.body)}\"")


def _message_text(mail: events.MessagePayload, name: Namer) -> str:
    verb = events.message_state(mail)
    detail = f"message {mail.message_id[:8]}"
    if isinstance(mail, events.ProducerMessageAccepted):
        return _accepted_text(verb, mail, name)
    if isinstance(mail, events.ProducerMessageAdmitted):
        target = "the running run" if mail.run_id else "the next run"
        return f"{verb:<9} {detail} into {target}"
    if isinstance(mail, events.ProducerMessageDiscarded):
        return f"{verb:<9} {detail}: {mail.reason}"
    return f"{verb:<9} {detail}"


def _call(call: events.RecordedCall) -> str:
    """A tool call in short: its arguments, with the body (or task) last and quoted."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return f"{call.name}({_short(call.arguments, 40)})"
    if not isinstance(arguments, dict):
        return f"{call.name}({_short(call.arguments, 40)})"
    body = arguments.pop("body", None) or arguments.pop("task", None)
    shown = ", ".join(f"{key}={value}" for key, value in arguments.items()
                      if value is not None)
    return f"{call.name}({shown})" + (f": \"{_short(body, 48)}\"" if body else "")


def _model_text(output: events.ModelOutput) -> str:
    parts = [f"says \"{_short(output.text)}\""] if output.text else []
    parts += [f"calls {_call(call)}" for call in output.tool_calls]
    return "model " + ("; ".join(parts) if parts else "replied with nothing")


def _id(data: object) -> str:
    return str(data.get("message_id") if isinstance(data, dict) else None)[:8]


def brief_result(content: object) -> str:
    """A tool result in short: a send's id/mode/recipient_state, a handle, or an error."""
    try:
        result = json.loads(str(content))
    except ValueError:
        return str(content)
    if not isinstance(result, dict):
        return str(content)
    if "error" in result:
        return f"error {result['error']}"
    if "handle" in result:
        return f"handle={result['handle']}"
    if "message_id" in result:
        return (f"message_id={_id(result)} mode={result.get('mode')} "
                f"recipient_state={result.get('recipient_state')}")
    return ", ".join(f"{key}={value}" for key, value in result.items())


def _results_text(results: events.ToolResults) -> str:
    shown = "; ".join(_short(brief_result(r.content), 72) for r in results.results)
    return f"tool results ({len(results.results)}): {shown}"


def _approval_text(payload: events.ApprovalRequested | events.ApprovalAnswered) -> str:
    if isinstance(payload, events.ApprovalRequested):
        return (f"approval {short_approval_id(payload.approval_id)} asked: {payload.tool} to a "
                f"{payload.label} peer waits for the user")
    scope = f", scope {payload.scope}" if payload.scope else ""
    return (f"approval {short_approval_id(payload.approval_id)} {payload.state.value}{scope}: "
            f"{_short(payload.outcome.text(), 48)}")


def _run_text(payload: events.RunPayload) -> str:
    if isinstance(payload, events.RunQueued):
        return f"run {payload.run_number} queued ({payload.reason})"
    if isinstance(payload, events.RunStarted):
        return f"run {payload.run_number} started"
    if isinstance(payload, events.RunFinished):
        return f"run {payload.run_number} finished"
    return f"run {payload.run_number} interrupted ({payload.reason}){_fault(payload)}"


def _fault(payload: events.RunInterrupted) -> str:
    """A model failure's status, endpoint and hint, each only once: the reason may already
    quote them, and a row says a thing once."""
    parts = [(f"HTTP {payload.status}" if payload.status is not None else None),
             payload.endpoint, payload.hint]
    shown = [part for part in parts if part and part not in payload.reason]
    return f" [{'; '.join(shown)}]" if shown else ""


def _session_text(payload: events.SessionCreated | events.SessionReverted
                  | events.SessionForked, name: Namer) -> str:
    if isinstance(payload, events.SessionCreated):
        parent = payload.parent_session_id
        text = f"session created ({'child of ' + name(parent) if parent else 'tree root'})"
        return f"{text}: {payload.description}" if payload.description else text
    if isinstance(payload, events.SessionForked):
        return f"session forked from {name(payload.source)} at #{payload.upto}"
    return f"session reverted (branch of {name(payload.branch)})"


def _request_text(payload: events.RequestBegun | events.RequestCommitted
                  | events.RequestAborted) -> str:
    if isinstance(payload, events.RequestBegun):
        count = len(payload.message_ids)
        return f"model request opened at a safe boundary, claiming {count} message(s)"
    verb = "committed" if isinstance(payload, events.RequestCommitted) else "aborted"
    return f"model request {verb}"


_SESSION_KINDS = (events.SessionCreated, events.SessionReverted, events.SessionForked)
_RUN_KINDS = (events.RunQueued, events.RunStarted, events.RunFinished, events.RunInterrupted)
_REQUEST_KINDS = (events.RequestBegun, events.RequestCommitted, events.RequestAborted)


def _tone_and_text(payload: events.Payload, name: Namer) -> tuple[Tone, str]:
    if isinstance(payload, events.MESSAGE_PAYLOADS):
        return Tone.MAIL, _message_text(payload, name)
    if isinstance(payload, _SESSION_KINDS):
        return Tone.SESSION, _session_text(payload, name)
    if isinstance(payload, _RUN_KINDS):
        return Tone.RUN, _run_text(payload)
    if isinstance(payload, _REQUEST_KINDS):
        return Tone.REQUEST, _request_text(payload)
    if isinstance(payload, events.ModelOutput):
        return Tone.MODEL, _model_text(payload)
    if isinstance(payload, events.ToolResults):
        return Tone.TOOL, _results_text(payload)
    if isinstance(payload, events.ApprovalRequested | events.ApprovalAnswered):
        return Tone.APPROVAL, _approval_text(payload)
    if isinstance(payload, events.ExternalTokenIssued):
        return Tone.SESSION, f"token {payload.token_id} issued (an MCP client may bind it)"
    if isinstance(payload, events.ExternalTokenRevoked):
        return Tone.SESSION, f"token {payload.token_id} revoked"
    return Tone.MAIL, f"delegation result sent to the parent (message {payload.message_id[:8]})"


def event_row(event: Event, name: Namer,
              payload: events.Payload | events.UnknownEvent | None = None) -> Row:
    """The row of one stored event (``payload``: its payload, when already read). An entry
    this version cannot read is shown as such, with its kind and why, and the transcript
    goes on."""
    payload = events.read(event) if payload is None else payload
    key = f"event:{event.session_id}:{event.seq}"
    who = name(event.session_id)
    if isinstance(payload, events.UnknownEvent):
        text = f"unreadable {payload.kind} entry, skipped ({payload.reason})"
        return Row(key, event.session_id, event.seq, who, Tone.UNKNOWN, text)
    tone, text = _tone_and_text(payload, name)
    if isinstance(payload, events.MESSAGE_PAYLOADS):
        return Row(f"mail:{payload.message_id}", event.session_id, event.seq, who, tone, text,
                   events.message_state(payload))
    return Row(key, event.session_id, event.seq, who, tone, text)


def render_event(event: Event, name: Namer) -> str:
    """One transcript row as a plain line (what ``treemail log`` prints)."""
    return event_row(event, name).line()


def render_log(events: Iterable[Event], sessions: Iterable[Session]) -> list[str]:
    """Rows for a replayed log, naming sessions by handle (UUID for legacy sessions)."""
    names = {s.session_id: s.reference for s in sessions}

    def name(session_id: str | None) -> str:
        return names.get(session_id or "", session_id or "?")

    return [render_event(event, name) for event in events]


class Transcript:
    """Events folded into the rows a reader watches: each message is one mail row, shown as
    accepted (sender, mode, body) and updated in place as it is admitted, claimed, released,
    consumed or discarded (with the reason); request bookkeeping is left to the mail rows.

    Sessions are named by the handles their ``SessionCreated`` events carry, after ``names``
    (for a view of one session, whose senders were created in other logs). Only the events
    given are folded, in the order given: live and replay differ in nothing else.
    """

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names: dict[str, str] = dict(names or {})
        self._rows: dict[str, Row] = {}
        self._said: dict[str, str] = {}  # a message's sender, mode and body, by row key
        self._why: dict[str, str] = {}  # a discarded message's reason, by row key

    def name(self, session_id: str | None) -> str:
        return self.names.get(session_id or "", session_id or "?")

    def add(self, event: Event,
            payload: events.Payload | events.UnknownEvent | None = None) -> Row | None:
        """Fold one event (``payload``: its payload, when already read); the row it added or
        updated, or None for a hidden event."""
        payload = events.read(event) if payload is None else payload
        if isinstance(payload, events.SessionCreated):  # named before it is rendered
            self.names[event.session_id] = payload.handle or event.session_id
        row = event_row(event, self.name, payload)
        if row.tone is Tone.REQUEST:
            return None
        if isinstance(payload, events.ProducerMessageAccepted):
            self._said[row.key] = _accepted_text("", payload, self.name).lstrip()
        if isinstance(payload, events.ProducerMessageDiscarded):
            self._why[row.key] = payload.reason
        earlier = self._rows.get(row.key)
        if earlier is not None and row.state is not None and row.key in self._said:
            row = self._restated(earlier, row.state)
        self._rows[row.key] = row
        return row

    def _restated(self, first: Row, state: str) -> Row:
        """A mail row at its first place, in ``state``, saying what its accepted event said."""
        reason = self._why.get(first.key) if state == MessageState.DISCARDED.value else None
        text = f"{state:<9} {self._said[first.key]}" + (f" — {reason}" if reason else "")
        return attrs.evolve(first, text=text, state=state)

    def prepend(self, log: Iterable[Event],
                payloads: Iterable[events.Payload | events.UnknownEvent] | None = None,
                ) -> list[Row]:
        """Fold ``log``, events that all precede the ones folded so far (an older page of
        the feed, read newest first): the rows end as folding the whole feed in order would
        leave them. A row first seen in ``log`` goes before the others; a message whose newer
        events were folded already keeps its first place and its newest state. Returns the
        rows ``log`` added or changed. ``payloads``: the events' payloads, when already read."""
        older = Transcript(self.names)
        if payloads is None:
            older.extend(log)
        else:
            for event, payload in zip(log, payloads, strict=True):
                older.add(event, payload)
        self.names.update(older.names)
        self._said = {**older._said, **self._said}
        self._why = {**older._why, **self._why}
        touched: list[Row] = []
        for key, row in older._rows.items():
            newer = self._rows.pop(key, None)
            if newer is not None and newer.state is not None:  # one message's rows
                # As the in-order fold: restated at its first place when its accepted
                # event was seen, else the newest event's own row.
                row = self._restated(row, newer.state) if key in self._said else newer
            touched.append(row)
        self._rows = {**{row.key: row for row in touched}, **self._rows}
        return touched

    def extend(self, log: Iterable[Event]) -> None:
        for event in log:
            self.add(event)

    def row(self, key: str) -> Row | None:
        return self._rows.get(key)

    def rows(self, session_id: str | None = None) -> list[Row]:
        """The rows in the order they first appeared (one session's, when given)."""
        return [r for r in self._rows.values() if session_id in (None, r.session_id)]

    def lines(self, session_id: str | None = None) -> list[str]:
        return [row.line() for row in self.rows(session_id)]

