"""What an operator types for a session, a message or an approval, resolved to the id the
daemon takes.

The rows `treemail tail`, `replay` and `sessions` print name a session by its handle, a
message by the first 8 characters of its id, and an approval by its short id (8 hex digits of
a hash of its whole id: the whole id begins with its session's UUID, so its first characters
would be the same for every approval of a session). The client commands accept those forms
too: a session by its UUID, its handle, or a unique prefix of its UUID; a message by its UUID
or a unique prefix of it; a held call by its short id, a prefix of it, or a prefix of its whole
id (``session/run/tool call``). The protocol itself keeps taking full ids only; this is a
convenience of the command line, resolved through the same methods any client has.

A form that names nothing is ``engine:unknown_target``, naming the close matches if there are
("did you mean"); one that names several is ``engine:invalid_request`` listing them, never a
guess.
"""

from __future__ import annotations

import difflib
import hashlib
import uuid
from typing import TYPE_CHECKING

from treemail.core.errors import InvalidRequest, UnknownTarget
from treemail.protocol import types as t
from treemail.protocol.methods import APPROVAL_LIST, MESSAGE_LIST, SESSION_LIST

if TYPE_CHECKING:
    from treemail.adapters.daemon.client import DaemonClient

__all__ = ["approval_id", "close_matches", "message_id", "session_id", "short_approval_id"]

# A prefix shorter than this would match by accident in any real tree.
MIN_PREFIX = 4
# How many candidates an ambiguity error lists.
SHOWN = 5
# Hex digits of an approval's short id: 32 bits, as a message's 8 characters are.
SHORT = 8


def short_approval_id(approval_id: str) -> str:
    """The approval's short id: stable (a hash of its whole id, nothing stored), and unlike
    its first characters not shared by the session's other approvals."""
    return hashlib.sha256(approval_id.encode()).hexdigest()[:SHORT]


def close_matches(text: str, names: list[str]) -> str:
    """``did you mean 'a' or 'b'? `` for the names close to ``text``, or nothing."""
    near = difflib.get_close_matches(text, names, n=3)
    return f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def _one(what: str, text: str, found: list[str], hint: str,
         shown: dict[str, str] | None = None) -> str:
    if len(found) == 1:
        return found[0]
    if not found:
        raise UnknownTarget(f"no {what} {text!r}; {hint}", reference=text)
    names = sorted((shown or {}).get(f, f) for f in found)
    listed = ", ".join(names[:SHOWN]) + (" ..." if len(found) > SHOWN else "")
    raise InvalidRequest(f"{text!r} names {len(found)} {what}s ({listed}); give more of the "
                         "id, or the full one", reference=text, matches=len(found))


async def _sessions(client: DaemonClient) -> list[t.SessionView]:
    return await client.every(SESSION_LIST, t.SessionListParams())


async def session_id(client: DaemonClient, text: str) -> str:
    """The session ``text`` names: its UUID, its handle, or a unique prefix of its UUID."""
    if _is_uuid(text):
        return text
    sessions = await _sessions(client)
    hint = "`treemail sessions` lists every session with its handle"
    by_handle = [s.session_id for s in sessions if s.handle == text]
    if by_handle:  # handles are tree-scoped: the same one in two trees is ambiguous
        return _one("session", text, by_handle, hint)
    found = ([s.session_id for s in sessions if s.session_id.startswith(text)]
             if len(text) >= MIN_PREFIX else [])
    if not found:  # a mistyped handle: the handles it is close to, else where to look
        near = close_matches(text, sorted({s.handle for s in sessions if s.handle}))
        raise UnknownTarget(f"no session named {text!r}; {near}{hint}",
                            reference=text)
    return _one("session", text, found, hint)


async def message_id(client: DaemonClient, text: str) -> str:
    """The message ``text`` names: its UUID, or a unique prefix of it (the rows show 8)."""
    hint = "`treemail replay SESSION` shows a session's messages"
    if _is_uuid(text):
        return text
    if len(text) < MIN_PREFIX:
        raise UnknownTarget(f"no message {text!r}; {hint}", reference=text)
    found: list[str] = []
    for session in await _sessions(client):
        params = t.MessageListParams(session_id=session.session_id)
        async for page in client.pages(MESSAGE_LIST, params):
            found += [m.message_id for m in page if m.message_id.startswith(text)]
    return _one("message", text, found, hint)


async def approval_id(client: DaemonClient, text: str) -> str:
    """The held call ``text`` names: its short id or a prefix of it, or its whole approval
    id (session/run/tool call) or a prefix of that, among the calls still held.

    An answered approval is no longer listed, so a whole id that names no held call passes
    through untouched and the daemon says what became of it. Only then: a prefix may hold
    both slashes too (``SESSION/RUN/oper``), and it is looked up like any other."""
    hint = "`treemail approve` lists the calls that wait for approval"
    listed = await client.request(APPROVAL_LIST, t.ApprovalListParams())
    held = [a.approval_id for a in listed.approvals]
    if text in held:
        return text
    short = {a: short_approval_id(a) for a in held}
    found = ([a for a in held if short[a].startswith(text) or a.startswith(text)]
             if len(text) >= MIN_PREFIX else [])
    if not found and text.count("/") == 2:
        return text
    return _one("held call", text, found, hint, {a: f"approval {short[a]}" for a in held})
