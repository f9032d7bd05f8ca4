"""What an operator types for a session or a message, resolved to the id the daemon takes.

The rows `treemail tail`, `replay` and `sessions` print name a session by its handle, and a
message or an approval by the first 8 characters of its id, so the client commands accept
those forms too: a session by its UUID, its handle, or a unique prefix of its UUID; a message
by its UUID or a unique prefix of it; a held call by a unique prefix of its approval id. The
protocol itself keeps taking full ids only; this is a convenience of the command line,
resolved through the same methods any client has.

A form that names nothing is ``engine:unknown_target``; one that names several is
``engine:invalid_request`` listing them, never a guess.
"""

from __future__ import annotations

import uuid
from typing import Any

from treemail.adapters.daemon.client import DaemonClient
from treemail.core.errors import InvalidRequest, UnknownTarget

__all__ = ["approval_id", "message_id", "session_id"]

# A prefix shorter than this would match by accident in any real tree.
MIN_PREFIX = 4
# How many candidates an ambiguity error lists.
SHOWN = 5


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def _one(what: str, text: str, found: list[str], hint: str) -> str:
    if len(found) == 1:
        return found[0]
    if not found:
        raise UnknownTarget(f"no {what} {text!r}; {hint}", reference=text)
    listed = ", ".join(sorted(found)[:SHOWN]) + (" ..." if len(found) > SHOWN else "")
    raise InvalidRequest(f"{text!r} names {len(found)} {what}s ({listed}); give more of the "
                         "id, or the full UUID", reference=text, matches=len(found))


async def _sessions(client: DaemonClient) -> list[dict[str, Any]]:
    sessions: list[dict[str, Any]] = await client.every("session.list")
    return sessions


async def session_id(client: DaemonClient, text: str) -> str:
    """The session ``text`` names: its UUID, its handle, or a unique prefix of its UUID."""
    if _is_uuid(text):
        return text
    sessions = await _sessions(client)
    hint = "`treemail sessions` lists every session with its handle"
    by_handle = [s["session_id"] for s in sessions if s["handle"] == text]
    if by_handle:  # handles are tree-scoped: the same one in two trees is ambiguous
        return _one("session", text, by_handle, hint)
    if len(text) < MIN_PREFIX:
        raise UnknownTarget(f"no session {text!r}; {hint}", reference=text)
    return _one("session", text,
                [s["session_id"] for s in sessions if s["session_id"].startswith(text)], hint)


async def message_id(client: DaemonClient, text: str) -> str:
    """The message ``text`` names: its UUID, or a unique prefix of it (the rows show 8)."""
    hint = "`treemail replay SESSION` shows a session's messages"
    if _is_uuid(text):
        return text
    if len(text) < MIN_PREFIX:
        raise UnknownTarget(f"no message {text!r}; {hint}", reference=text)
    found: list[str] = []
    for session in await _sessions(client):
        async for page in client.pages("message.list", {"session_id": session["session_id"]}):
            found += [m["message_id"] for m in page if m["message_id"].startswith(text)]
    return _one("message", text, found, hint)


async def approval_id(client: DaemonClient, text: str) -> str:
    """The held call ``text`` names: its approval id (session/run/tool call), or a unique
    prefix of one still held (the rows show the session's first 8 characters).

    An answered approval is no longer listed, so a whole id passes through untouched and the
    daemon says what became of it."""
    hint = "`treemail approve` lists the calls that wait for approval"
    if text.count("/") == 2:
        return text
    held = (await client.call("approval.list"))["approvals"]
    if len(text) < MIN_PREFIX:
        raise UnknownTarget(f"no held call {text!r}; {hint}", reference=text)
    return _one("held call", text,
                [a["approval_id"] for a in held if a["approval_id"].startswith(text)], hint)
