"""Rendering the event log as a readable, auditable transcript, live or replayed.

Mail rows are ``ProducerMessage*`` events whatever the mode, so steer and queue deliveries
read the same way in a live tail and in a replay of the stored log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from treemail.core.records import Event, Session

__all__ = ["Namer", "render_event", "render_log"]

Namer = Callable[[str | None], str]

_WIDTH = 72


def _short(text: object, width: int = 60) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _message_row(event: Event, name: Namer) -> str:
    data = event.data
    verb = event.kind.removeprefix("ProducerMessage").lower()
    owner = data.get("owner")
    origin = f"{owner} mail from {name(_str(data.get('sender')))}" if data.get("sender") else (
        f"{owner} mail"
    )
    detail = f"message {_str(data.get('message_id'))[:8]}"
    if verb == "accepted":
        hop = data.get("agent_hop")
        extras = f"mode={data.get('mode')}" + (f", hop={hop}" if owner == "agent" else "")
        return f"{verb:<9} {origin} ({extras}): \"{_short(data.get('body'))}\""
    if verb == "admitted":
        target = "the running run" if data.get("run_id") else "the next run"
        return f"{verb:<9} {detail} into {target}"
    if verb == "discarded":
        return f"{verb:<9} {detail}: {data.get('reason')}"
    return f"{verb:<9} {detail}"


def _str(value: object) -> str:
    return "" if value is None else str(value)


_SESSION_ROWS: Mapping[str, str] = {
    "RunQueued": "run {run_number} queued ({reason})",
    "RunStarted": "run {run_number} started",
    "RunFinished": "run {run_number} finished",
    "RunInterrupted": "run {run_number} interrupted ({reason})",
    "RequestCommitted": "model request committed",
    "RequestAborted": "model request aborted",
}


def render_event(event: Event, name: Namer) -> str:
    """One transcript row: who, which event, what it means."""
    who = name(event.session_id)
    if event.kind.startswith("ProducerMessage"):
        body = _message_row(event, name)
    elif event.kind == "SessionCreated":
        parent = event.data.get("parent_session_id")
        body = f"session created ({'child of ' + name(_str(parent)) if parent else 'tree root'})"
    elif event.kind == "RequestBegun":
        claimed = event.data.get("message_ids")
        count = len(claimed) if isinstance(claimed, list | tuple) else 0
        body = f"model request opened at a safe boundary, claiming {count} message(s)"
    else:
        template = _SESSION_ROWS.get(event.kind, event.kind)
        body = template.format_map({k: _str(v) for k, v in event.data.items()})
    return f"  {who:<22} #{event.seq:<3} {body}"


def render_log(events: Iterable[Event], sessions: Iterable[Session]) -> list[str]:
    """Rows for a replayed log, naming sessions by handle (UUID for legacy sessions)."""
    names = {s.session_id: s.reference for s in sessions}

    def name(session_id: str | None) -> str:
        return names.get(session_id or "", session_id or "?")

    return [render_event(event, name) for event in events]
