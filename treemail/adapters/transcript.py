"""Rendering the event log as a readable, auditable transcript, live or replayed.

Mail rows are ``ProducerMessage*`` events whatever the mode, so steer and queue deliveries
read the same way in a live tail and in a replay of the stored log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from treemail.core import events
from treemail.core.records import Event, Session

__all__ = ["Namer", "render_event", "render_log"]

Namer = Callable[[str | None], str]

_WIDTH = 72


def _short(text: object, width: int = 60) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _message_row(mail: events.MessagePayload, name: Namer) -> str:
    verb = events.message_state(mail)
    owner = mail.owner.OWNER.value
    origin = f"{owner} mail from {name(mail.sender)}" if mail.sender else f"{owner} mail"
    detail = f"message {mail.message_id[:8]}"
    if isinstance(mail, events.ProducerMessageAccepted):
        hop = f", hop={mail.agent_hop}" if isinstance(mail.owner, events.AgentOwner) else ""
        return f"{verb:<9} {origin} (mode={mail.mode.value}{hop}): \"{_short(mail.body)}\""
    if isinstance(mail, events.ProducerMessageAdmitted):
        target = "the running run" if mail.run_id else "the next run"
        return f"{verb:<9} {detail} into {target}"
    if isinstance(mail, events.ProducerMessageDiscarded):
        return f"{verb:<9} {detail}: {mail.reason}"
    return f"{verb:<9} {detail}"


def _row(payload: events.Payload, name: Namer) -> str:
    if isinstance(payload, events.MESSAGE_PAYLOADS):
        return _message_row(payload, name)
    if isinstance(payload, events.SessionCreated):
        parent = payload.parent_session_id
        return f"session created ({'child of ' + name(parent) if parent else 'tree root'})"
    if isinstance(payload, events.RequestBegun):
        count = len(payload.message_ids)
        return f"model request opened at a safe boundary, claiming {count} message(s)"
    if isinstance(payload, events.RunQueued):
        return f"run {payload.run_number} queued ({payload.reason})"
    if isinstance(payload, events.RunStarted):
        return f"run {payload.run_number} started"
    if isinstance(payload, events.RunFinished):
        return f"run {payload.run_number} finished"
    if isinstance(payload, events.RunInterrupted):
        return f"run {payload.run_number} interrupted ({payload.reason})"
    return _plain(payload)


def _plain(payload: events.Payload) -> str:
    """Kinds without a row of their own: the kind and its fields."""
    if isinstance(payload, events.RequestCommitted | events.RequestAborted):
        verb = "committed" if isinstance(payload, events.RequestCommitted) else "aborted"
        return f"model request {verb}"
    return payload.KIND.value  # their details are the demo's and the history's to show


def _str(value: object) -> str:
    return "" if value is None else str(value)


def render_event(event: Event, name: Namer) -> str:
    """One transcript row: who, which event, what it means. An entry this version cannot read
    is shown as such, with its kind and why, and the transcript goes on."""
    who = name(event.session_id)
    payload = events.read(event)
    if isinstance(payload, events.UnknownEvent):
        body = f"unreadable {payload.kind} entry, skipped ({payload.reason})"
    else:
        body = _row(payload, name)
    return f"  {who:<22} #{event.seq:<3} {body}"


def render_log(events: Iterable[Event], sessions: Iterable[Session]) -> list[str]:
    """Rows for a replayed log, naming sessions by handle (UUID for legacy sessions)."""
    names = {s.session_id: s.reference for s in sessions}

    def name(session_id: str | None) -> str:
        return names.get(session_id or "", session_id or "?")

    return [render_event(event, name) for event in events]
